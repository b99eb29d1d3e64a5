package wireguard

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/bench/netnstest"
	weftun "github.com/weftnet/weft/tun"
)

// TestCreateTUN: a new device's TUN is multi-queue, so that a second device (a new
// weftd's, in a hand-over) attaches beside the first; one an older weftd made
// single-queue is opened as it is.
func TestCreateTUN(t *testing.T) {
	for _, c := range []struct {
		name      string
		old       bool // made single-queue (persistent) first, as by an older weftd
		wantMulti bool
	}{
		{"new", false, true},
		{"older weftd's", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := netnstest.New(t, "weft-wgtun")
			err := ns.Do(func() error {
				if c.old {
					fd, err := weftun.OpenVnetFD("flannel-wg", false)
					if err != nil {
						return err
					}
					if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
						unix.Close(fd)
						return err
					}
					unix.Close(fd)
				}
				first, multi, err := createTUN("flannel-wg", 1420)
				if err != nil {
					t.Fatalf("createTUN: %v", err)
				}
				defer first.Close()
				if multi != c.wantMulti {
					t.Errorf("multi-queue %v, want %v", multi, c.wantMulti)
				}
				second, multi2, err := createTUN("flannel-wg", 1420)
				switch {
				case c.wantMulti && err != nil:
					t.Errorf("a second queue beside the first: %v", err)
				case c.wantMulti && !multi2:
					t.Errorf("the second queue is not multi-queue")
				case !c.wantMulti && err == nil:
					t.Errorf("a second queue attached to a single-queue TUN")
				}
				if second != nil {
					second.Close()
				}
				out, err := ns.Run(context.Background(), "ip", "-d", "link", "show", "flannel-wg")
				if err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				if got := strings.Contains(out, "multi_queue"); got != c.wantMulti {
					t.Errorf("ip -d link: multi_queue %v, want %v:\n%s", got, c.wantMulti, out)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
