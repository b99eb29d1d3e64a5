package handover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Listener holds the hand-over socket for the weftd that runs: a new weftd's request
// comes out of Requests, and Close tells every new weftd that asked that this one has
// stopped.
type Listener struct {
	ln   *net.UnixListener
	reqs chan Request

	mu     sync.Mutex
	asked  []*net.UnixConn // accepted requests, answered "stopped" by Close
	closed bool
	wg     sync.WaitGroup
}

// Request is a new weftd's request to take over.
type Request struct {
	PID int // the new weftd's process
}

// Listen holds name (see Name); ErrHeld when a weftd runs.
func Listen(name string) (*Listener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@" + name, Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w (@%s)", ErrHeld, name)
		}
		return nil, fmt.Errorf("hand-over socket @%s: %w", name, err)
	}
	l := &Listener{ln: ln, reqs: make(chan Request, 1)}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Requests gives the first new weftd's request to take over; later ones are answered
// "busy" until this weftd has stopped.
func (l *Listener) Requests() <-chan Request { return l.reqs }

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.serve(c)
		}()
	}
}

// serve reads one request; the connection stays open until Close when it is taken.
func (l *Listener) serve(c *net.UnixConn) {
	cred, err := peerCred(c)
	if err != nil || int(cred.Uid) != os.Geteuid() {
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Now().Add(requestTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != askLine {
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		fmt.Fprintln(c, stoppedLine)
		c.Close()
		return
	}
	if len(l.asked) > 0 { // another new weftd was first
		fmt.Fprintln(c, busyLine)
		c.Close()
		return
	}
	l.reqs <- Request{PID: int(cred.Pid)} // room for the one request taken
	l.asked = append(l.asked, c)
	fmt.Fprintf(c, "%s %d\n", stoppingLine, os.Getpid())
}

// Close gives the name up and tells the new weftd that asked (if one did) that this
// one has stopped. Call it last, when nothing of this weftd runs any more.
func (l *Listener) Close() error {
	err := l.ln.Close()
	l.mu.Lock()
	l.closed = true
	for _, c := range l.asked {
		fmt.Fprintln(c, stoppedLine)
		c.Close()
	}
	l.asked = nil
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

// Ask asks the weftd holding name to stop, and waits until it has; it returns the old
// weftd's process ID. ErrRefused: another new weftd asked first. An error wrapping
// syscall.ECONNREFUSED: no weftd holds name any more (Listen again).
func Ask(ctx context.Context, name string) (pid int, err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", "@"+name)
	if err != nil {
		return 0, fmt.Errorf("hand-over socket @%s: %w", name, err)
	}
	c := conn.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	cred, err := peerCred(c)
	if err != nil {
		return 0, err
	}
	if int(cred.Uid) != os.Geteuid() {
		return 0, fmt.Errorf("%w: uid %d", ErrStranger, cred.Uid)
	}
	if _, err := fmt.Fprintln(c, askLine); err != nil {
		return 0, fmt.Errorf("hand-over: %w", err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, readErr(ctx, err)
	}
	word, num, _ := strings.Cut(strings.TrimSpace(line), " ")
	if word != stoppingLine {
		return 0, fmt.Errorf("%w: the weftd that runs answered %q", ErrRefused, strings.TrimSpace(line))
	}
	pid, _ = strconv.Atoi(num)
	// "stopped", or the connection closed at the old weftd's end when it exited
	// without saying so: it has stopped either way.
	if _, err = r.ReadString('\n'); err != nil && !errors.Is(err, io.EOF) {
		return pid, readErr(ctx, err)
	}
	return pid, nil
}

func readErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("hand-over: %w", ctx.Err())
	}
	return fmt.Errorf("hand-over: %w", err)
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("hand-over peer credentials: %w", cerr)
	}
	return cred, nil
}
