package tun

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Queue is one file descriptor of a TUN device. Read drains the queue without
// blocking once a packet is in hand; Write writes a batch. Neither allocates.
type Queue struct {
	name string
	f    *os.File
	rc   syscall.RawConn
	vnet bool // packets carry a virtio-net header in front
	uso  bool // UDP segmentation offload (with vnet)

	// read state, used by readFn inside rc.Read
	rbufs  [][]byte
	rsizes []int
	roff   int
	rn     int
	rerr   error
	rtry   bool // TryRead: return on EAGAIN instead of waiting
	readFn func(uintptr) bool

	// write state, used by writeFn inside rc.Write, guarded by wmu: wlen packets,
	// each written by wone (writeOne for Write, gatherOne for WriteGather)
	wmu        sync.Mutex
	wlen       int
	wone       func(fd uintptr, i int) error
	wi         int
	wn         int
	werr       error
	writeFn    func(uintptr) bool
	wbufs      [][]byte // Write's packets
	woff       int
	writeOneFn func(fd uintptr, i int) error
	gpkts      [][][]byte // WriteGather's packets and iovecs
	iov        []unix.Iovec
	gatherFn   func(fd uintptr, i int) error
}

func newQueue(name string, f *os.File) (*Queue, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tun %s: raw conn: %w", name, err)
	}
	q := &Queue{name: name, f: f, rc: rc}
	q.readFn = q.doRead
	q.writeFn = q.doWrite
	q.writeOneFn, q.gatherFn = q.writeOne, q.gatherOne
	return q, nil
}

// Read reads at least one packet and then as many more as are ready, up to len(bufs):
// packet i goes to bufs[i][offset:] and its size to sizes[i]; with VnetHdr its
// virtio-net header goes to the VnetHdrLen bytes before offset. It returns the number of
// packets read; an error comes with n == 0 (or after the packets read before it).
func (q *Queue) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return q.read(bufs, sizes, offset, false)
}

// TryRead is Read without the wait: it returns 0 packets and no error when the queue
// is empty. A busy-polling worker calls it in a loop.
func (q *Queue) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return q.read(bufs, sizes, offset, true)
}

// SyscallConn gives the queue's file descriptor, for poll(2) beside other sources.
func (q *Queue) SyscallConn() (syscall.RawConn, error) { return q.rc, nil }

func (q *Queue) read(bufs [][]byte, sizes []int, offset int, try bool) (int, error) {
	if q.vnet {
		offset -= VnetHdrLen
	}
	q.rbufs, q.rsizes, q.roff, q.rn, q.rerr, q.rtry = bufs, sizes, offset, 0, nil, try
	err := q.rc.Read(q.readFn)
	n, rerr := q.rn, q.rerr
	q.rbufs, q.rsizes = nil, nil
	if err == nil {
		err = rerr
	}
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			err = ErrClosed
		}
		return n, fmt.Errorf("tun %s: read: %w", q.name, err)
	}
	return n, nil
}

func (q *Queue) doRead(fd uintptr) bool {
	for q.rn < len(q.rbufs) {
		n, err := rawRead(fd, q.rbufs[q.rn][q.roff:])
		switch {
		case err == nil:
			if q.vnet {
				n -= VnetHdrLen
			}
			q.rsizes[q.rn] = n
			q.rn++
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			return q.rn > 0 || q.rtry // nothing yet: wait for the poller
		default:
			q.rerr = err
			return true
		}
	}
	return true
}

// Write writes bufs[i][offset:] as one packet each. It tries every packet; n counts
// those the kernel took and err is the first failure. Writes may come from several
// goroutines.
func (q *Queue) Write(bufs [][]byte, offset int) (int, error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.vnet {
		offset -= VnetHdrLen
	}
	q.wbufs, q.woff = bufs, offset
	n, err := q.write(len(bufs), q.writeOneFn)
	q.wbufs = nil // drop the references to the caller's buffers
	return n, err
}

func (q *Queue) writeOne(fd uintptr, i int) error {
	return rawWrite(fd, q.wbufs[i][q.woff:])
}

// write writes n packets, packet i with one(fd, i), waiting in the poller whenever
// the queue is full. The caller holds wmu.
func (q *Queue) write(n int, one func(fd uintptr, i int) error) (int, error) {
	q.wlen, q.wone, q.wi, q.wn, q.werr = n, one, 0, 0, nil
	err := q.rc.Write(q.writeFn)
	written, werr := q.wn, q.werr
	q.wone = nil
	if err == nil {
		err = werr
	}
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			err = ErrClosed
		}
		return written, fmt.Errorf("tun %s: write: %w", q.name, err)
	}
	return written, nil
}

func (q *Queue) doWrite(fd uintptr) bool {
	for q.wi < q.wlen {
		err := q.wone(fd, q.wi)
		switch {
		case err == nil:
			q.wn++
			q.wi++
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			return false // wait until writable, resume at wi
		default:
			if q.werr == nil {
				q.werr = err
			}
			q.wi++
		}
	}
	return true
}

// Close closes the queue; a blocked Read returns ErrClosed.
// SetReadDeadline makes a Read waiting at t, or called after it, return an error
// that wraps os.ErrDeadlineExceeded; what is queued before then is read.
func (q *Queue) SetReadDeadline(t time.Time) error { return q.f.SetReadDeadline(t) }

func (q *Queue) Close() error {
	if err := q.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("tun %s: close queue: %w", q.name, err)
	}
	return nil
}

// setPersist sets or clears the device's persist flag (TUNSETPERSIST): a persistent
// device stays when its last queue closes.
func (q *Queue) setPersist(on bool) error {
	v := 0
	if on {
		v = 1
	}
	var serr error
	err := q.rc.Control(func(fd uintptr) { serr = unix.IoctlSetInt(int(fd), unix.TUNSETPERSIST, v) })
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("tun %s: TUNSETPERSIST %d: %w", q.name, v, err)
	}
	return nil
}
