package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/weftnet/weft/bench/testenv"
)

// scrape is one /metrics scrape of a weftd, by family name.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics GETs /metrics from weftd on h and parses the Prometheus text format.
func scrapeMetrics(h *host) (scrape, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.ns.DialContext}, Timeout: 5 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:8475/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("/metrics Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(resp.Body)
}

func mustScrape(t *testing.T, h *host) scrape {
	t.Helper()
	got, err := scrapeMetrics(h)
	if err != nil {
		t.Fatalf("scrape %s: %v", h.name, err)
	}
	return got
}

// value returns the value of the sample of family name whose labels include labels
// (name=value pairs), and whether there is one.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	mf := s[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func (s scrape) must(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := s.value(name, labels...)
	if !ok {
		t.Fatalf("/metrics has no %s%v", name, labels)
	}
	return v
}

// rose fails the test unless the sample grew by at least min between two scrapes.
func rose(t *testing.T, host string, before, after scrape, min float64, name string, labels ...string) {
	t.Helper()
	d := after.must(t, name, labels...) - before.must(t, name, labels...)
	if d < min {
		t.Errorf("%s: %s%v rose by %v, want at least %v", host, name, labels, d, min)
	} else {
		t.Logf("%s: %s%v rose by %v (at least %v)", host, name, labels, d, min)
	}
}

// TestMetrics scrapes weftd's /metrics around real traffic between pods on two udp
// hosts: the packet and byte counters move by at least what the pings and the iperf3
// transfer must have moved, junk datagrams show up as drops by reason, the lease
// metrics describe the lease in etcd, and an etcd outage shows in etcd_reachable and
// (v2, whose watch breaks with the connection) in the watch errors and the resyncs.
func TestMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root, network namespaces and etcd")
	}
	for _, api := range []string{"v3", "v2"} {
		t.Run(api, func(t *testing.T) { testMetrics(t, api) })
	}
}

func testMetrics(t *testing.T, api string) {
	c, hosts, pods := podClusterAPI(t, api, "udp", map[string]string{"a": "lan1", "b": "lan1"})
	meshPing(c, hosts, pods, "a", "b")
	a, b := hosts["a"], hosts["b"]
	beforeA, beforeB := mustScrape(t, a), mustScrape(t, b)

	// Static facts first.
	for name, sc := range map[string]scrape{"a": beforeA, "b": beforeB} {
		if v := sc.must(t, "weft_ready"); v != 1 {
			t.Errorf("%s: weft_ready %v", name, v)
		}
		if v := sc.must(t, "weft_peers"); v != 1 {
			t.Errorf("%s: weft_peers %v, want 1", name, v)
		}
		if v := sc.must(t, "weft_etcd_reachable"); v != 1 {
			t.Errorf("%s: weft_etcd_reachable %v", name, v)
		}
		if v := sc.must(t, "weft_build_info"); v != 1 {
			t.Errorf("%s: weft_build_info %v", name, v)
		}
		sc.must(t, "go_goroutines")
		sc.must(t, "process_cpu_seconds_total")
	}
	// The lease expiry is the one etcd holds: 24 h from when it was granted.
	exp := beforeA.must(t, "weft_lease_expiry_timestamp_seconds")
	if left := time.Until(time.Unix(int64(exp), 0)); left < 23*time.Hour || left > 24*time.Hour+time.Minute {
		t.Errorf("weft_lease_expiry_timestamp_seconds is %v away, want about 24h", left.Round(time.Second))
	}
	envA := a.daemon.Env()
	if v := beforeA.must(t, "weft_lease_info", "subnet", envA.Subnet.Masked().String(), "backend", "udp"); v != 1 {
		t.Errorf("weft_lease_info for %v: %v", envA.Subnet, v)
	}

	// 50 pings of 1000 data bytes: each is an inner IPv4 packet of 1028 bytes, each way.
	const pings, pingBytes = 50, 1000 + 8 + 20
	out, err := a.pod.Run(context.Background(), "ping", "-n", "-q", "-c", fmt.Sprint(pings), "-i", "0.01", "-s", "1000", "-W", "2", pods["b"])
	if got := pingReceived(out); err != nil || got != pings {
		t.Fatalf("ping a -> b: %d of %d replies (%v)\n%s", got, pings, err, out)
	}
	// An iperf3 transfer a -> b: its payload bytes crossed both data paths.
	sent := iperfBytes(t, a, b, pods["b"], 2)
	afterA, afterB := mustScrape(t, a), mustScrape(t, b)

	rose(t, "a", beforeA, afterA, pings, "weft_udp_packets_total", "direction", "tx")
	rose(t, "a", beforeA, afterA, pings, "weft_udp_packets_total", "direction", "rx")
	rose(t, "b", beforeB, afterB, pings, "weft_udp_packets_total", "direction", "rx")
	rose(t, "b", beforeB, afterB, pings, "weft_udp_packets_total", "direction", "tx")
	rose(t, "a", beforeA, afterA, float64(pings*pingBytes)+sent, "weft_udp_bytes_total", "direction", "tx")
	rose(t, "b", beforeB, afterB, float64(pings*pingBytes)+sent, "weft_udp_bytes_total", "direction", "rx")
	rose(t, "a", beforeA, afterA, pings*pingBytes, "weft_udp_bytes_total", "direction", "rx")
	// Every drop reason is exported, even at zero.
	for _, r := range []string{"malformed", "unknown_source", "spoofed_source", "not_local", "ttl", "no_route", "not_overlay", "send_error", "tun_error"} {
		afterA.must(t, "weft_udp_dropped_packets_total", "reason", r)
	}

	// Datagrams from the router, which holds no lease, are dropped as unknown_source.
	conn, err := c.router.DialContext(context.Background(), "udp", a.ip+":8285")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	inner := ipv4Packet(t, "198.18.200.2", pods["a"])
	const junk = 7
	for range junk {
		if _, err := conn.Write(inner); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		now, err := scrapeMetrics(a)
		if err != nil {
			return err
		}
		v0, _ := afterA.value("weft_udp_dropped_packets_total", "reason", "unknown_source")
		v1, _ := now.value("weft_udp_dropped_packets_total", "reason", "unknown_source")
		if v1-v0 < junk {
			return fmt.Errorf("unknown_source drops rose by %v, want %d", v1-v0, junk)
		}
		return nil
	})

	// An etcd outage: reachable drops to 0; after etcd is back it is 1 again. On v2 the
	// watch of the other leases failed and was re-listed; v3's watch resumes from its
	// revision by itself, with nothing to re-list.
	c.etcd.Stop()
	eventually(t, 30*time.Second, func() error {
		now, err := scrapeMetrics(a)
		if err != nil {
			return err
		}
		if v, _ := now.value("weft_etcd_reachable"); v != 0 {
			return fmt.Errorf("weft_etcd_reachable %v while etcd is stopped", v)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.etcd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		now, err := scrapeMetrics(a)
		if err != nil {
			return err
		}
		if v, _ := now.value("weft_etcd_reachable"); v != 1 {
			return fmt.Errorf("weft_etcd_reachable %v after etcd is back", v)
		}
		for _, name := range []string{"weft_lease_watch_errors_total", "weft_lease_watch_resyncs_total"} {
			if api != "v2" {
				now.must(t, name)
				continue
			}
			v0, _ := beforeA.value(name)
			v1, _ := now.value(name)
			if v1-v0 < 1 {
				return fmt.Errorf("%s rose by %v over an etcd outage", name, v1-v0)
			}
		}
		return nil
	})
	// The data path did not stop for any of it.
	c.ping(a.pod, pods["b"])
}

// iperfBytes runs an iperf3 TCP transfer from h's pod to dst (on to's pod) and returns
// the payload bytes the receiver got.
func iperfBytes(t *testing.T, from, to *host, dst string, seconds int) float64 {
	t.Helper()
	testenv.NeedTools(t, "iperf3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+20)*time.Second)
	defer cancel()
	srv := to.pod.Command(ctx, "iperf3", "-s", "-1", "-p", "5298")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var n float64
	eventually(t, 10*time.Second, func() error {
		out, err := from.pod.Command(ctx, "iperf3", "-c", dst, "-p", "5298", "-t", fmt.Sprint(seconds), "-J").Output()
		if err != nil {
			return fmt.Errorf("iperf3: %v: %s", err, exitText(err))
		}
		var r struct {
			End struct {
				SumReceived struct {
					Bytes float64 `json:"bytes"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			return err
		}
		if n = r.End.SumReceived.Bytes; n <= 0 {
			return fmt.Errorf("iperf3 moved nothing: %s", out)
		}
		return nil
	})
	return n
}
