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

	weftlab "github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
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

// With labOpts.v6 the hosts are dual-stack inside: fd00:10::/48 in /64 subnets, a
// pod address (::1 of the subnet) on lo; with labOpts.under6 the underlay is IPv6 too:
// eth0s get 2001:db8::10 and ::11/64 and each table sends the other host's subnets there.
var (
	lab6Network = netip.MustParsePrefix("fd00:10::/48")
	lab6Subnet  = [2]netip.Prefix{netip.MustParsePrefix("fd00:10:0:1::/64"), netip.MustParsePrefix("fd00:10:0:2::/64")}
	lab6Pod     = [2]netip.Addr{netip.MustParseAddr("fd00:10:0:1::1"), netip.MustParseAddr("fd00:10:0:2::1")}
	lab6Under   = [2]netip.Addr{netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::11")}
)

const (
	labMTU  = 1500 - 28
	labMTU6 = 1500 - 48 // over the IPv6 underlay: 40 bytes of IPv6 header, 8 of UDP
)

type labHost struct {
	ns     *netns.NS
	under  netip.Addr // eth0's address
	under6 netip.Addr // eth0's IPv6 address (labOpts.under6)
	dev    *tun.Device
	px     *Proxy
	table  *Table
}

type lab struct {
	hosts [2]*labHost
}

type labOpts struct {
	queues  int
	offload bool
	noUSO   bool // with offload: without UDP segmentation offload
	v6      bool // IPv6 inside too
	under6  bool // and over an IPv6 underlay (implies v6)
	cfg     Config
	// notRun: host b's Proxy is made but not run (the test runs it).
	notRun bool
}

func newLab(t testing.TB, o labOpts) *lab {
	t.Helper()
	ll := labtest.New(t, weftlab.Spec{Prefix: "wpx", NoRouter: true, Hosts: []weftlab.HostSpec{{Name: "a"}, {Name: "b"}}})
	l := &lab{}
	for i, h := range ll.Hosts() {
		l.hosts[i] = &labHost{ns: h.NS, under: h.Addr}
		if o.under6 {
			o.v6 = true
			l.hosts[i].under6 = lab6Under[i]
			mustRun(t, h.NS, "ip", "-6", "addr", "add", lab6Under[i].String()+"/64", "dev", "eth0", "nodad")
		}
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
		routes := []Route{{Subnet: labSubnet[peer], PublicIP: l.hosts[peer].under}}
		mtu := labMTU
		if o.under6 {
			mtu = labMTU6
		}
		setup := tun.Setup{Addr: labSubnet[i].Addr(), MTU: mtu, Routes: []netip.Prefix{labNetwork}}
		if o.v6 {
			mustRun(t, h.ns, "ip", "-6", "addr", "add", lab6Pod[i].String()+"/128", "dev", "lo", "nodad")
			if err := table.EnableIPv6(lab6Network, 64); err != nil {
				t.Fatal(err)
			}
			if err := table.SetLocal(lab6Subnet[i]); err != nil {
				t.Fatal(err)
			}
			pub := l.hosts[peer].under
			if o.under6 {
				pub = l.hosts[peer].under6
				routes[0].PublicIP = pub // the IPv4 overlay too: an IPv6-only underlay
			}
			routes = append(routes, Route{Subnet: lab6Subnet[peer], PublicIP: pub})
			setup.Addr6 = lab6Subnet[i].Addr()
			setup.Routes = append(setup.Routes, lab6Network)
		}
		if err := table.Apply(routes, nil); err != nil {
			t.Fatal(err)
		}
		h.table = table
		err = h.ns.Do(func() error {
			d, err := tun.Open(tun.Config{Name: "flannel0", Queues: o.queues, Offload: o.offload, NoUSO: o.noUSO}, log)
			if err != nil {
				return err
			}
			h.dev = d
			if err := d.Configure(setup); err != nil {
				return err
			}
			var qs []TUN
			for _, q := range d.Queues() {
				qs = append(qs, q)
			}
			cfg := o.cfg
			cfg.MTU = mtu
			cfg.IPv6 = o.under6
			h.px, err = New(cfg, table, qs, log)
			return err
		})
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		if o.notRun && i == 1 {
			t.Cleanup(func() { h.px.Close() })
			continue
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
