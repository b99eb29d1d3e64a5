package proxy

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PollTUN is a TUN queue a busy-polling worker can drive: TryRead returns at once (0
// packets when the queue is empty) and SyscallConn gives the descriptor that poll(2)
// waits on once the worker goes idle. tun.Queue implements it.
type PollTUN interface {
	TUN
	TryRead(bufs [][]byte, sizes []int, offset int) (int, error)
	SyscallConn() (syscall.RawConn, error)
}

// busyPoller is the state of a worker that moves both directions from one loop.
type busyPoller struct {
	window time.Duration
	tun    PollTUN
	stopR  *os.File // readable (hung up) once the proxy closes
	stopW  *os.File
}

// newBusyPoller prepares busy polling of tun for window after each packet; ok is
// false when the queue cannot be polled that way.
func newBusyPoller(t TUN, window time.Duration) (bp *busyPoller, ok bool, err error) {
	pt, ok := t.(PollTUN)
	if !ok {
		return nil, false, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, true, fmt.Errorf("busy poll: %w", err)
	}
	return &busyPoller{window: window, tun: pt, stopR: r, stopW: w}, true, nil
}

// stop wakes the loop from its wait; the closed queue and socket then end it.
func (bp *busyPoller) stop() { bp.stopW.Close() }

// release frees what the loop waited on, once it has returned (or never ran).
func (bp *busyPoller) release() { bp.stopR.Close() }

// busyPoll forwards both directions until the queue or socket fails (closed). While
// packets came within the window it polls both without sleeping, so a packet never
// waits for a thread to wake up (the cost that dominates RTT on an idle host); after
// that it sleeps in poll(2) until either side is readable.
func (w *worker) busyPoll() error {
	bp := w.busy
	fds := []unix.PollFd{{Events: unix.POLLIN}, {Events: unix.POLLIN}, {Fd: int32(bp.stopR.Fd()), Events: unix.POLLIN}}
	rc, err := bp.tun.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { fds[0].Fd = int32(fd) })
	}
	if err == nil {
		err = w.conn.Control(func(fd uintptr) { fds[1].Fd = int32(fd) })
	}
	if err != nil {
		return fmt.Errorf("busy poll: %w", err)
	}
	last := time.Now()
	for {
		n, err := bp.tun.TryRead(w.tx.bufs, w.tx.sizes, Headroom)
		if n > 0 {
			w.egressBatch(n)
		}
		if err != nil {
			return err
		}
		m, err := w.conn.TryRecv()
		if m > 0 {
			w.ingressBatch(m)
		}
		if err != nil {
			return err
		}
		if n+m > 0 {
			last = time.Now()
			continue
		}
		if time.Since(last) < bp.window {
			// Let whatever else is runnable here go first (the pods, the kernel's
			// threads, another worker): the CPU stays awake without starving them.
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		w.cnt.pollSleeps.Add(1)
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("busy poll: %w", err)
		}
		if fds[2].Revents != 0 {
			// Closing: the next reads fail with the queue's or socket's error.
			fds[2].Fd = -1
		}
		last = time.Now()
	}
}
