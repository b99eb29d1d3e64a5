package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// binary returns $WEFT_BIN/name (make test sets WEFT_BIN; make build gives weftd, make
// flanneld the upstream flanneld).
func binary(t *testing.T, name string) string {
	t.Helper()
	bin := os.Getenv("WEFT_BIN")
	p := filepath.Join(bin, name)
	_, err := os.Stat(p)
	testenv.Need(t, bin != "" && err == nil, "WEFT_BIN=<dir> with "+name+" in it (make build flanneld; make test sets it)")
	return p
}

func labNamespaces(t *testing.T) map[string]bool {
	t.Helper()
	out, err := netns.Run(context.Background(), "ip", "netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (strings.HasPrefix(f[0], "wb-") || strings.HasPrefix(f[0], "ws-")) {
			m[f[0]] = true
		}
	}
	return m
}

// TestTinyMatrix runs every subject (and the upstream flanneld as a --daemon row) for
// one repetition of one second, and checks every row has non-zero figures (TCP, UDP,
// pings; daemon CPU for the userspace rows, weftd-wireguard and wireguard-go among
// them) and that nothing is left behind.
func TestTinyMatrix(t *testing.T) { tinyMatrix(t, 4) }

// TestTinyMatrixIPv6 is TestTinyMatrix with --family 6: every row carries IPv6 pod to
// pod over an IPv6 underlay, and flanneld's udp row is n/a (flannel's udp is IPv4-only).
func TestTinyMatrixIPv6(t *testing.T) { tinyMatrix(t, 6) }

func tinyMatrix(t *testing.T, family int) {
	if testing.Short() {
		t.Skip("e2e")
	}
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip", "bridge", "etcd", "iperf3", "ping", "sysctl", "socat", "wireguard-go", "wg", "unshare")
	before := labNamespaces(t)
	subjects := Subjects(binary(t, "weftd"), [][2]string{{"flanneld", binary(t, "flanneld")}})
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	state := filepath.Join(t.TempDir(), "run.json")
	testenv.OnInterrupt(t, "bench lab", func() error { return lab.Down(state) })
	t.Cleanup(func() { _ = lab.Down(state) })
	rep, err := Run(ctx, Options{Subjects: subjects, Reps: 1, Duration: time.Second, Pings: 50, Family: family,
		Idle: 2 * time.Second, StateFile: state, Progress: &progress}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	var table strings.Builder
	_ = rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	if len(rep.Rows) != len(subjects) || rep.Family != family {
		t.Fatalf("%d rows for %d subjects, family %d (want %d)", len(rep.Rows), len(subjects), rep.Family, family)
	}
	if rep.IdleS != 2 || rep.Kernel == "" || rep.CPUs == 0 {
		t.Errorf("run record: idle window %gs, kernel %q, %d CPUs", rep.IdleS, rep.Kernel, rep.CPUs)
	}
	for i, row := range rep.Rows {
		if row.Subject != subjects[i].Name {
			t.Errorf("row %d is %s, want %s", i, row.Subject, subjects[i].Name)
		}
		if wantNA := family == 6 && (row.Subject == "flanneld" || row.Subject == SocatUDP || row.Subject == WireGuardGo); (row.NotApplicable != "") != wantNA {
			t.Errorf("%s: not applicable %q, want n/a: %v", row.Subject, row.NotApplicable, wantNA)
		}
		if row.NotApplicable != "" {
			if len(row.Reps) > 0 || len(row.Errors) > 0 {
				t.Errorf("%s: n/a but measured: %+v", row.Subject, row)
			}
			continue
		}
		if len(row.Errors) > 0 {
			t.Errorf("%s: %s", row.Subject, strings.Join(row.Errors, "\n"))
			continue
		}
		for _, k := range []string{TCPGbps, UDPKpps, RTTMedian, RTTP99} {
			if row.Median[k] <= 0 {
				t.Errorf("%s: %s = %v, want > 0", row.Subject, k, row.Median[k])
			}
		}
		// Only a userspace data path costs the daemon CPU per byte; with vxlan and
		// host-gw the kernel forwards and the daemon's share rounds to zero. Both
		// WireGuard rows run the device in userspace.
		userspace := subjects[i].Binary != "" && subjects[i].Backend == "udp" || row.Subject == SocatUDP ||
			row.Subject == WireGuardGo || row.Subject == WeftdWireGuard
		if userspace && row.Median[CPUPerGBs] <= 0 {
			t.Errorf("%s: daemon CPU per GB %v, want > 0", row.Subject, row.Median[CPUPerGBs])
		}
		// Every row with daemons has its idle CPU from the idle window; kernel rows none.
		if idle, ok := row.Median[IdleCPUPct]; ok != (subjects[i].Binary != "" || row.Subject == SocatUDP || row.Subject == WireGuardGo) || idle < 0 || idle > 100 {
			t.Errorf("%s: idle CPU %v (present %v)", row.Subject, idle, ok)
		}
		if row.Subject != Underlay && row.VsUnderlay[TCPGbps] <= 0 {
			t.Errorf("%s: no TCP ratio to the underlay", row.Subject)
		}
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"report.md", "report.json", "report.svg"} {
		if st, err := os.Stat(filepath.Join(dir, n)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", n, err)
		}
	}
	for n := range labNamespaces(t) {
		if !before[n] {
			t.Errorf("namespace %s left behind", n)
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state file left behind: %v", err)
	}
}
