package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// socketBackend is a backend that only passes and takes sockets (encap.SocketPasser).
type socketBackend struct {
	mu    sync.Mutex
	pass  map[string]*os.File
	taken map[string]*os.File
}

var _ encap.SocketPasser = (*socketBackend)(nil)

func (*socketBackend) Type() string                                         { return "test" }
func (*socketBackend) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }
func (*socketBackend) Register(context.Context, lease.Lease) error          { return nil }
func (*socketBackend) MTU() int                                             { return 1500 }
func (*socketBackend) HandleEvents(context.Context, []lease.Event)          {}
func (*socketBackend) Run(context.Context) error                            { return nil }
func (*socketBackend) Close() error                                         { return nil }

func (b *socketBackend) PassSockets() map[string]*os.File {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pass
	b.pass = nil
	return p
}

func (b *socketBackend) TakeSockets(files map[string]*os.File) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.taken = files
}

// TestSuccessionPassesSockets: the weftd that stops for a new one passes its backend's
// sockets, and the new weftd's backend takes them, with what waited in them.
func TestSuccessionPassesSockets(t *testing.T) {
	subnetFile := filepath.Join(t.TempDir(), "subnet.env") // names the hand-over socket
	log := zaptest.NewLogger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	old := newSuccession(subnetFile, log)
	if old.hold() {
		t.Fatal("a weftd holds the name already")
	}
	asked := make(chan struct{})
	var once sync.Once
	old.watch(ctx, func() { once.Do(func() { close(asked) }) })

	sock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	f, err := sock.File()
	if err != nil {
		t.Fatal(err)
	}
	sock.Close() // the copy keeps the socket
	oldBe, newBe := &socketBackend{pass: map[string]*os.File{"test-socket": f}}, &socketBackend{}

	nw := newSuccession(subnetFile, log)
	if !nw.hold() {
		t.Fatal("the new weftd does not find the one that runs")
	}
	took := make(chan error, 1)
	go func() { took <- nw.takeOver(ctx, newBe) }()
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the weftd that runs was not asked to stop")
	}
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("waits")); err != nil {
		t.Fatal(err)
	}
	old.pass(oldBe)
	if err := old.release(nil); !errors.Is(err, ErrHandedOver) {
		t.Fatalf("the old weftd's release: %v, want ErrHandedOver", err)
	}
	if err := <-took; err != nil {
		t.Fatalf("takeOver: %v", err)
	}
	defer nw.release(nil)

	newBe.mu.Lock()
	got := newBe.taken["test-socket"]
	newBe.mu.Unlock()
	if got == nil {
		t.Fatalf("the new backend took %v, want test-socket", newBe.taken)
	}
	defer got.Close()
	pc, err := net.FilePacketConn(got)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	buf := make([]byte, 16)
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := pc.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "waits" || pc.LocalAddr().(*net.UDPAddr).AddrPort() != addr {
		t.Fatalf("the socket taken, on %v: read %q, %v; want what waited in %v", pc.LocalAddr(), buf[:n], err, addr)
	}
}
