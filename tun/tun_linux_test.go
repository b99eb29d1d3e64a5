package tun

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/bench/netnstest"
)

func TestOpenConfigureClose(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     Config
		queues  int
		offload bool
	}{
		{"one queue", Config{Queues: 1}, 1, false},
		{"multi-queue", Config{Queues: 3}, 3, false},
		{"multi-queue off", Config{Queues: 3, NoMultiQueue: true}, 1, false},
		{"offload", Config{Queues: 2, Offload: true, TxQueueLen: 2000}, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := netnstest.New(t, "weft-tun")
			ctx := context.Background()
			var d *Device
			cfg := c.cfg
			cfg.Name = "flannel0"
			err := ns.Do(func() error {
				var err error
				d, err = Open(cfg, zaptest.NewLogger(t))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			if len(d.Queues()) != c.queues || d.Queues()[0].VnetHdr() != c.offload {
				t.Fatalf("%d queues (offload %v), want %d (%v)", len(d.Queues()), d.Queues()[0].VnetHdr(), c.queues, c.offload)
			}
			// Configure runs outside the namespace: the handle made at Open keeps it.
			s := Setup{Addr: netip.MustParseAddr("198.18.7.0"), Addr6: netip.MustParseAddr("fd00:7::"), MTU: 1400,
				Routes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("fd00::/32")}}
			if err := d.Configure(s); err != nil {
				t.Fatal(err)
			}
			// Moving to a new lease replaces the address.
			s.Addr, s.Addr6 = netip.MustParseAddr("198.18.8.0"), netip.MustParseAddr("fd00:8::")
			if err := d.Configure(s); err != nil {
				t.Fatal(err)
			}
			out, err := ns.Run(ctx, "ip", "-d", "addr", "show", "flannel0")
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"198.18.8.0/32", "fd00:8::/128", "mtu 1400", "UP", "tun"} {
				if !strings.Contains(out, want) {
					t.Errorf("flannel0 lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "198.18.7.0") || strings.Contains(out, "fd00:7::") {
				t.Errorf("old address left:\n%s", out)
			}
			if c.cfg.Offload && !strings.Contains(out, "qlen 2000") {
				t.Errorf("txqueuelen not set:\n%s", out)
			}
			routes, _ := ns.Run(ctx, "ip", "route", "show", "dev", "flannel0")
			// flanneld's route: scope universe (ip prints no scope for it).
			if !strings.Contains(routes, "198.18.0.0/16") || strings.Contains(routes, "scope") {
				t.Errorf("no overlay route of scope universe: %s", routes)
			}
			if routes6, _ := ns.Run(ctx, "ip", "-6", "route", "show", "dev", "flannel0"); !strings.Contains(routes6, "fd00::/32") {
				t.Errorf("no IPv6 overlay route: %s", routes6)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if out, err := ns.Run(ctx, "ip", "link", "show", "flannel0"); err == nil {
				t.Fatalf("flannel0 left after Close: %s", out)
			}
		})
	}
}

func TestOpenBadName(t *testing.T) {
	for _, name := range []string{"", "a-name-far-too-long-for-linux"} {
		if _, err := Open(Config{Name: name}, zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), "tun") {
			t.Errorf("Open(%q) = %v", name, err)
		}
	}
}

// TestReadWrite moves a packet through the device: written into the TUN (as if
// received), answered by the kernel (ICMP echo reply), read back in a batch.
func TestReadWrite(t *testing.T) {
	for _, offload := range []bool{false, true} {
		for _, gather := range []bool{false, true} {
			name := map[bool]string{false: "plain", true: "offload"}[offload] + map[bool]string{false: "", true: "/gather"}[gather]
			t.Run(name, func(t *testing.T) { testReadWrite(t, offload, gather) })
		}
	}
}

// testReadWrite writes an ICMP echo request to the TUN (with Write, or with
// WriteGather in three pieces) and reads the kernel's reply.
func testReadWrite(t *testing.T, offload, gather bool) {
	ns := netnstest.New(t, "weft-tunrw")
	var d *Device
	err := ns.Do(func() error {
		var err error
		d, err = Open(Config{Name: "flannel0", Queues: 1, Offload: offload}, zaptest.NewLogger(t))
		if err != nil {
			return err
		}
		return d.Configure(Setup{Addr: netip.MustParseAddr("198.18.1.0"), MTU: 1400,
			Routes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	q := d.Queues()[0]
	const off = 16
	// ICMP echo request 198.18.2.1 -> 198.18.1.0, checksums precomputed.
	echo := []byte{0x45, 0, 0, 28, 0, 1, 0, 0, 64, 1, 0, 0, 198, 18, 2, 1, 198, 18, 1, 0,
		8, 0, 0, 0, 0x12, 0x34, 0, 1}
	putCsum(echo[:20], 10)
	putCsum(echo[20:], 2)
	buf := make([]byte, off+65535)
	copy(buf[off:], echo)
	if gather {
		var pieces [][]byte
		if offload {
			pieces = append(pieces, make([]byte, VnetHdrLen)) // no offload asked
		}
		pieces = append(pieces, echo[:7], nil, echo[7:])
		// A packet of more pieces than writev takes fails alone: the next one is
		// still written.
		tooMany := make([][]byte, maxIovecs+1)
		for i := range tooMany {
			tooMany[i] = echo[:1]
		}
		n, err := q.WriteGather([][][]byte{tooMany, pieces})
		if n != 1 || !errors.Is(err, unix.EINVAL) {
			t.Fatalf("write gather: %d, %v; want 1 and EINVAL", n, err)
		}
	} else if n, err := q.Write([][]byte{buf[:off+len(echo)]}, off); n != 1 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	sizes := make([]int, 4)
	bufs := [][]byte{buf, make([]byte, off+65535), make([]byte, off+65535), make([]byte, off+65535)}
	for range 10 { // the kernel may send other things first (none expected over IPv4)
		n, err := q.Read(bufs, sizes, off)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			p := bufs[i][off : off+sizes[i]]
			if len(p) >= 28 && p[0]>>4 == 4 && p[9] == 1 && p[20] == 0 {
				if string(p[16:20]) != string(echo[12:16]) {
					t.Fatalf("reply to %v", p[16:20])
				}
				return
			}
		}
	}
	t.Fatal("no echo reply read from the TUN")
}

func putCsum(b []byte, at int) {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	b[at], b[at+1] = byte(^s>>8), byte(^s)
}

// TestPersist closes a persistent device and opens it again, as a restarted weftd
// does: the device, its addresses, MTU and routes outlive the queues (the same
// ifindex: found, not made again), and only Remove deletes it.
func TestPersist(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"one queue", Config{Queues: 1}},
		{"multi-queue", Config{Queues: 2}},
		{"offload", Config{Queues: 2, Offload: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := netnstest.New(t, "weft-tunp")
			ctx := context.Background()
			cfg := c.cfg
			cfg.Name, cfg.Persist = "flannel0", true
			s := Setup{Addr: netip.MustParseAddr("198.18.7.0"), Addr6: netip.MustParseAddr("fd00:7::"), MTU: 1400,
				Routes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("fd00::/32")}}
			open := func() *Device {
				t.Helper()
				var d *Device
				if err := ns.Do(func() (err error) { d, err = Open(cfg, zaptest.NewLogger(t)); return err }); err != nil {
					t.Fatal(err)
				}
				if err := d.Configure(s); err != nil {
					d.Remove()
					t.Fatal(err)
				}
				return d
			}
			show := func() string {
				t.Helper()
				out, err := ns.Run(ctx, "ip", "-d", "-o", "link", "show", "flannel0")
				if err != nil {
					t.Fatalf("flannel0: %v %s", err, out)
				}
				addrs, _ := ns.Run(ctx, "ip", "addr", "show", "flannel0")
				routes, _ := ns.Run(ctx, "ip", "route", "show", "dev", "flannel0")
				routes6, _ := ns.Run(ctx, "ip", "-6", "route", "show", "dev", "flannel0")
				return out + addrs + routes + routes6
			}
			d := open()
			if d.Found() {
				t.Error("Found on a new namespace's first Open")
			}
			before := show()
			index := strings.Fields(before)[0]
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			kept := show()
			for _, want := range []string{index, "persist on", "mtu 1400", "198.18.7.0/32", "fd00:7::/128", "198.18.0.0/16", "fd00::/32"} {
				if !strings.Contains(kept, want) {
					t.Errorf("after Close, flannel0 lacks %q:\n%s", want, kept)
				}
			}
			d = open()
			t.Cleanup(func() { d.Remove() })
			if !d.Found() {
				t.Error("the second Open made the device instead of finding it")
			}
			if again := show(); !strings.HasPrefix(again, index) {
				t.Errorf("flannel0 made again (was %s):\n%s", index, again)
			}
			if err := d.Remove(); err != nil {
				t.Fatal(err)
			}
			if out, err := ns.Run(ctx, "ip", "link", "show", "flannel0"); err == nil {
				t.Fatalf("flannel0 left after Remove: %s", out)
			}
		})
	}
}
