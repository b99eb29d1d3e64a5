package proxy

import (
	"context"
	"encoding/json"

	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/internal/netns"
	weftlab "github.com/weftnet/weft/lab"
	"github.com/weftnet/weft/lab/labtest"
	"github.com/weftnet/weft/tun"
)

// The lab (package lab, without router or etcd): two hosts whose eth0s are the ends
// of one veth, 192.0.2.10 and 192.0.2.11, each with an in-process udp data path on
// flannel0 for its subnet of 198.18.0.0/16 and a "pod" address (.1 of its subnet) on lo.
var (
	labNetwork = netip.MustParsePrefix("198.18.0.0/16")
	labSubnet  = [2]netip.Prefix{netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("198.18.2.0/24")}
	labPod     = [2]netip.Addr{netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.2.1")}
)

const labMTU = 1500 - 28

type labHost struct {
	ns    *netns.NS
	under netip.Addr // eth0's address
	dev   *tun.Device
	px    *Proxy
	table *Table
}

type lab struct {
	hosts [2]*labHost
}

type labOpts struct {
	queues  int
	offload bool
	noUSO   bool // with offload: without UDP segmentation offload
	cfg     Config
}

func newLab(t testing.TB, o labOpts) *lab {
	t.Helper()
	ll := labtest.New(t, weftlab.Spec{Prefix: "wpx", NoRouter: true, Hosts: []weftlab.HostSpec{{Name: "a"}, {Name: "b"}}})
	l := &lab{}
	for i, h := range ll.Hosts() {
		l.hosts[i] = &labHost{ns: h.NS, under: h.Addr}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, h := range l.hosts {
			if h.dev != nil {
				if err := h.dev.Close(); err != nil {
					t.Errorf("close tun: %v", err)
				}
			}
		}
	})
	log := zap.NewNop()
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.InfoLevel))
	}
	for i, h := range l.hosts {
		mustRun(t, h.ns, "ip", "addr", "add", labPod[i].String()+"/32", "dev", "lo")
		table, err := NewTable(labNetwork, 24)
		if err != nil {
			t.Fatal(err)
		}
		if err := table.SetLocal(labSubnet[i]); err != nil {
			t.Fatal(err)
		}
		peer := 1 - i
		if err := table.Apply([]Route{{Subnet: labSubnet[peer], PublicIP: l.hosts[peer].under}}, nil); err != nil {
			t.Fatal(err)
		}
		h.table = table
		err = h.ns.Do(func() error {
			d, err := tun.Open(tun.Config{Name: "flannel0", Queues: o.queues, Offload: o.offload, NoUSO: o.noUSO}, log)
			if err != nil {
				return err
			}
			h.dev = d
			if err := d.Configure(tun.Setup{Addr: labSubnet[i].Addr(), MTU: labMTU, Routes: []netip.Prefix{labNetwork}}); err != nil {
				return err
			}
			var qs []TUN
			for _, q := range d.Queues() {
				qs = append(qs, q)
			}
			cfg := o.cfg
			cfg.MTU = labMTU
			h.px, err = New(cfg, table, qs, log)
			return err
		})
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.px.Run(ctx); err != nil {
				t.Errorf("host %d: run: %v", i, err)
			}
		}()
	}
	return l
}

func mustRun(t testing.TB, n *netns.NS, name string, args ...string) string {
	t.Helper()
	out, err := n.Run(context.Background(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// iperf3 runs a TCP transfer from host from's pod address to host to's for secs seconds
// and returns the received bits per second.
func iperf3(t testing.TB, from, to *netns.NS, src, dst netip.Addr, secs int) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	srv := to.Command(ctx, "iperf3", "-s", "-1", "-B", dst.String())
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = srv.Wait() }()
	var out string
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err = from.Run(ctx, "iperf3", "-c", dst.String(), "-B", src.String(), "-t", fmt.Sprint(secs), "-J")
		if !strings.Contains(out, "Connection refused") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the server is not listening yet
	}
	if err != nil || strings.Contains(out, `"error"`) {
		t.Fatalf("iperf3: %v\n%s\nserver: %s", err, out, srvOut.String())
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
		t.Fatalf("iperf3 output: %v: %s", err, out)
	}
	if res.End.SumReceived.BitsPerSecond <= 0 {
		t.Fatalf("iperf3 moved nothing: %s", out)
	}
	return res.End.SumReceived.BitsPerSecond
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
