package testenv

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
)

// A test binary stopped by SIGINT or SIGTERM (Ctrl-C in `make test` or `make bench`, a
// `timeout`) dies without running its cleanups, leaving namespaces and the daemons in
// them behind. OnInterrupt closes that gap: what a helper registers is undone by a
// signal handler before the binary exits. Signals are the whole process's, so the
// registry is too.
var interrupt struct {
	once  sync.Once
	mu    sync.Mutex
	next  int
	undos map[int]undo
}

type undo struct {
	what string
	f    func() error
}

// OnInterrupt makes sure f runs even if the test binary is interrupted while t is
// running: on SIGINT or SIGTERM every registered f runs, newest first, and the binary
// exits with status 1. At t's cleanup the registration is dropped. Call it before
// registering the caller's own cleanup: cleanups run last-in first-out, so the
// registration then outlives that cleanup, and a signal during it still undoes. f must
// be safe to call twice and beside the test's own use of what it removes.
func OnInterrupt(t testing.TB, what string, f func() error) {
	t.Helper()
	interrupt.once.Do(func() {
		interrupt.undos = map[int]undo{}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			s := <-sig
			os.Exit(runUndos(s))
		}()
	})
	interrupt.mu.Lock()
	id := interrupt.next
	interrupt.next++
	interrupt.undos[id] = undo{what, f}
	interrupt.mu.Unlock()
	t.Cleanup(func() {
		interrupt.mu.Lock()
		delete(interrupt.undos, id)
		interrupt.mu.Unlock()
	})
}

// runUndos runs every registered undo, newest first, and returns the exit status.
// The lock stays held, so a test still running cannot register more.
func runUndos(s os.Signal) int {
	interrupt.mu.Lock()
	fmt.Fprintf(os.Stderr, "testenv: %v: removing what %d running test(s) made\n", s, len(interrupt.undos))
	for id := interrupt.next - 1; id >= 0; id-- {
		u, ok := interrupt.undos[id]
		if !ok {
			continue
		}
		if err := u.f(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: remove %s: %v\n", u.what, err)
		}
	}
	return 1
}
