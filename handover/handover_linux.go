package handover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
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
	files  map[string]*os.File
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

// Pass gives the new weftd that asked these open files (sockets) by name, with the
// word that this one has stopped (Close): what waits in a socket is then the new
// one's to read. The Listener owns them from now on and closes its copies at Close.
// A name is letters, digits and '-'; a file of another name is closed at once.
func (l *Listener) Pass(files map[string]*os.File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, f := range files {
		if !fileName(name) || len(l.files) >= maxFiles {
			f.Close()
			continue
		}
		if l.files == nil {
			l.files = map[string]*os.File{}
		}
		if old, ok := l.files[name]; ok {
			old.Close()
		}
		l.files[name] = f
	}
}

// Close gives the name up and tells the new weftd that asked (if one did) that this
// one has stopped, passing it the files of Pass. Call it last, when nothing of this
// weftd runs any more.
func (l *Listener) Close() error {
	err := l.ln.Close()
	l.mu.Lock()
	l.closed = true
	names := slices.Sorted(maps.Keys(l.files))
	fds := make([]int, 0, len(names))
	for _, name := range names {
		// Fd would make the socket blocking, for the new weftd's copy too.
		if raw, err := l.files[name].SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) { fds = append(fds, int(fd)) })
		}
	}
	if len(fds) != len(names) {
		names, fds = nil, nil
	}
	line := strings.Join(append([]string{stoppedLine}, names...), " ") + "\n"
	for _, c := range l.asked {
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		_, _, _ = c.WriteMsgUnix([]byte(line), oob, nil)
		c.Close()
	}
	for _, f := range l.files {
		f.Close()
	}
	l.asked, l.files = nil, nil
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

// maxFiles bounds the files one hand-over passes.
const maxFiles = 8

func fileName(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") == ""
}

// Ask asks the weftd holding name to stop, and waits until it has; it returns the old
// weftd's process ID and the files it passed. ErrRefused: another new weftd asked
// first. An error wrapping syscall.ECONNREFUSED: no weftd holds name any more (Listen
// again).
func Ask(ctx context.Context, name string) (Taken, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", "@"+name)
	if err != nil {
		return Taken{}, fmt.Errorf("hand-over socket @%s: %w", name, err)
	}
	c := conn.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	cred, err := peerCred(c)
	if err != nil {
		return Taken{}, err
	}
	if int(cred.Uid) != os.Geteuid() {
		return Taken{}, fmt.Errorf("%w: uid %d", ErrStranger, cred.Uid)
	}
	if _, err := fmt.Fprintln(c, askLine); err != nil {
		return Taken{}, fmt.Errorf("hand-over: %w", err)
	}
	r := lineReader{c: c}
	defer r.closeFiles()
	line, err := r.line()
	if err != nil {
		return Taken{}, readErr(ctx, err)
	}
	word, num, _ := strings.Cut(line, " ")
	if word != stoppingLine {
		return Taken{}, fmt.Errorf("%w: the weftd that runs answered %q", ErrRefused, line)
	}
	var t Taken
	t.PID, _ = strconv.Atoi(num)
	// "stopped" and the names of the files that came with it, or the connection
	// closed at the old weftd's end when it exited without saying so: it has stopped
	// either way.
	line, err = r.line()
	if err != nil && !errors.Is(err, io.EOF) {
		return t, readErr(ctx, err)
	}
	names := strings.Fields(line)
	if len(names) > 0 && names[0] == stoppedLine && len(names)-1 == len(r.files) {
		t.Files = make(map[string]*os.File, len(r.files))
		for i, name := range names[1:] {
			t.Files[name] = os.NewFile(uintptr(r.files[i]), name)
		}
		r.files = nil
	}
	return t, nil
}

// lineReader reads lines of text and the descriptors that come with them.
type lineReader struct {
	c     *net.UnixConn
	buf   []byte
	files []int
}

// line is the next line, without its end.
func (r *lineReader) line() (string, error) {
	b := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4*maxFiles))
	for {
		if i := strings.IndexByte(string(r.buf), '\n'); i >= 0 {
			l := strings.TrimSpace(string(r.buf[:i]))
			r.buf = r.buf[i+1:]
			return l, nil
		}
		if len(r.buf) > 4096 {
			return "", errors.New("hand-over: a line too long")
		}
		n, oobn, _, _, err := r.c.ReadMsgUnix(b, oob)
		if oobn > 0 {
			if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for _, m := range msgs {
					if fds, perr := unix.ParseUnixRights(&m); perr == nil {
						r.files = append(r.files, fds...)
					}
				}
			}
		}
		if n > 0 {
			r.buf = append(r.buf, b[:n]...)
		}
		if err != nil {
			return strings.TrimSpace(string(r.buf)), err
		}
		if n <= 0 {
			return strings.TrimSpace(string(r.buf)), io.EOF
		}
	}
}

// closeFiles closes the descriptors not taken.
func (r *lineReader) closeFiles() {
	for _, fd := range r.files {
		unix.Close(fd)
	}
	r.files = nil
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
