package encap

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/testenv"
)

// watchFrame is how the kernel watch shows in a goroutine's stack.
const watchFrame = "encap.(*kernelPeers).watchKernel("

// goroutinesIn returns the stacks of the goroutines that have fn in theirs.
func goroutinesIn(fn string) []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			out = append(out, string(g))
		}
	}
	return out
}

// TestKernelRunWaitsForWatch: Run of a kernel backend returns only once the netlink
// watch it started has returned, even a watch slow to end (held up here by a hook),
// so weftd leaves no goroutine of the backend behind at shutdown.
func TestKernelRunWaitsForWatch(t *testing.T) {
	for _, typ := range []string{"vxlan", "host-gw"} {
		t.Run(typ, func(t *testing.T) {
			l := newKernelLab(t, typ, zaptest.NewLogger(t))
			l.k.period = time.Hour
			l.k.watchReturning = func() { time.Sleep(300 * time.Millisecond) }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- l.ns.Do(func() error { return l.be.Run(ctx) }) }()
			testenv.Eventually(t, 5*time.Second, func() error {
				if len(goroutinesIn(watchFrame)) == 0 {
					return fmt.Errorf("no goroutine runs %s yet", watchFrame)
				}
				return nil
			})
			cancel()
			select {
			case err := <-ran:
				if err != nil {
					t.Fatalf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return 10s after its context ended")
			}
			if left := goroutinesIn(watchFrame); len(left) > 0 {
				t.Fatalf("Run returned with the kernel watch still running:\n%s", left[0])
			}
		})
	}
}
