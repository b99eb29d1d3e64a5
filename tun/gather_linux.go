package tun

import (
	"fmt"

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
	q.gpkts = pkts
	n, err := q.write(len(pkts), q.gatherFn)
	q.gpkts = nil
	return n, err
}

// maxIovecs is the kernel's limit on pieces per writev (UIO_MAXIOV).
const maxIovecs = 1024

func (q *Queue) gatherOne(fd uintptr, i int) error { return q.writev(fd, q.gpkts[i]) }

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
	err := rawWritev(fd, iov)
	clear(iov) // drop the references to the caller's buffers
	return err
}
