package tun

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WriteGather writes each pkts[i] as one packet made of its pieces, joined by the
// kernel (writev): a coalesced run goes out without first being copied into one
// buffer. The pieces are the whole frame, the virtio-net header first when the queue
// has one (VnetHdr). It tries every packet; n counts those the kernel took and err is
// the first failure. It may run beside Write.
func (q *Queue) WriteGather(pkts [][][]byte) (int, error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	q.gpkts, q.wi, q.wn, q.werr = pkts, 0, 0, nil
	err := q.rc.Write(q.gatherFn)
	n, werr := q.wn, q.werr
	q.gpkts = nil
	if err == nil {
		err = werr
	}
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			err = ErrClosed
		}
		return n, fmt.Errorf("tun %s: write: %w", q.name, err)
	}
	return n, nil
}

// maxIovecs is the kernel's limit on pieces per writev (UIO_MAXIOV).
const maxIovecs = 1024

func (q *Queue) doGather(fd uintptr) bool {
	for q.wi < len(q.gpkts) {
		err := q.writev(fd, q.gpkts[q.wi])
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

// writev writes the pieces of one packet through q's iovec array (grown once to
// the largest packet seen, never past maxIovecs).
func (q *Queue) writev(fd uintptr, pieces [][]byte) error {
	if len(pieces) > maxIovecs {
		return fmt.Errorf("%d pieces: %w", len(pieces), unix.EINVAL)
	}
	if cap(q.iov) < len(pieces) {
		q.iov = make([]unix.Iovec, len(pieces))
	}
	iov := q.iov[:0]
	for _, p := range pieces {
		if len(p) == 0 {
			continue
		}
		v := unix.Iovec{Base: &p[0]}
		v.SetLen(len(p))
		iov = append(iov, v)
	}
	if len(iov) == 0 {
		return nil
	}
	_, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	clear(iov) // drop the references to the caller's buffers
	if e != 0 {
		return e
	}
	return nil
}
