package tun

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The queue's descriptor is non-blocking, so a read or write on it never sleeps: it
// moves the packet or fails with EAGAIN, and the wait happens in the runtime's poller.
// Such calls are made with RawSyscall, without telling the Go scheduler. A plain
// Syscall would enter the scheduler's syscall state, and the first one after the
// daemon was idle also wakes the runtime's monitor thread (sysmon sleeps while every P
// is idle): on a VM that is an interrupt to another vCPU on every packet of a sparse
// flow. The price is that a P stays with the thread for the length of the call; these
// calls are short, and they are CPU work the P would be busy with anyway.

func rawRead(fd uintptr, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd uintptr, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return e
	}
	return nil
}

func rawWritev(fd uintptr, iov []unix.Iovec) error {
	_, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return e
	}
	return nil
}
