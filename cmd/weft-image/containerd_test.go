package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/weftnet/weft/bench/testenv"
)

// ctrd is a private containerd: its own config, root, state and socket under a
// temporary directory, never the machine's /run/containerd or /var/lib/containerd.
type ctrd struct {
	dir, sock string
}

// startContainerd starts a private containerd and stops it, unmounts what it left and
// removes its directories when the test ends.
func startContainerd(t *testing.T) *ctrd {
	t.Helper()
	// A short path: the socket's must fit in sun_path.
	dir, err := os.MkdirTemp("", "weft-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &ctrd{dir: dir, sock: filepath.Join(dir, "c.sock")}
	t.Cleanup(func() {
		if err := errors.Join(unmountUnder(dir), os.RemoveAll(dir)); err != nil {
			t.Error(err)
		}
	})
	// CRI is off (ctr does not need it); restrict_oom_score_adj is set for runtimes that
	// lack CAP_SYS_RESOURCE should it be switched on.
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc")
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startDaemonProc(t, "containerd", exec.Command("containerd", "--config", cfgPath), filepath.Join(dir, "containerd.log"))
	p.await(t, 30*time.Second, func() error {
		_, err := c.ctr(context.Background(), "version")
		return err
	})
	return c
}

// ctr runs ctr against the private containerd.
func (c *ctrd) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"-a", c.sock}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// goBuildStatic builds a package of this module as a static binary into dir.
func goBuildStatic(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v: %s", pkg, err, b)
	}
	return out
}

// TestContainerdRunsImage builds the real image (static weftd, weft-install and
// weft-cni built here, iptables and nftables .debs from Debian), imports it
// into a private containerd and runs it with runc: weftd, iptables (nft and legacy, on
// the container's own network namespace), nft and the CNI install step.
func TestContainerdRunsImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and runs containerd: not in -short")
	}
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "containerd", "ctr", "runc", "apt-get", "apt-cache", "dpkg-deb", "go")
	bin := os.Getenv("WEFT_BIN")
	built := filepath.Join(bin, "weftd-image.tar")
	_, err := os.Stat(built)
	testenv.Need(t, bin != "" && err == nil, "WEFT_BIN/weftd-image.tar (make image)")

	ctx := context.Background()
	work := t.TempDir()
	weftd := goBuildStatic(t, work, "github.com/weftnet/weft/cmd/weftd")
	install := goBuildStatic(t, work, "github.com/weftnet/weft/cmd/weft-install")
	cniPlugin := goBuildStatic(t, work, "github.com/weftnet/weft/cmd/weft-cni")
	lock, err := readLock("debs.lock")
	if err != nil {
		t.Fatal(err)
	}
	host, err := findPlatform(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	// The cache make image fills, so the test downloads them at most once.
	debs, err := fetchLocked(ctx, defaultCache(), host, lock, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := spec{Weftd: weftd, Install: install, CNIPlugin: cniPlugin, Debs: debs,
		IptablesMode: "nft", Platform: host, Created: time.Unix(0, 0).UTC(), Version: "e2e"}
	d1, a1 := buildArchive(t, s)
	d2, a2 := buildArchive(t, s)
	if d1 != d2 || !bytes.Equal(a1, a2) {
		t.Fatalf("two builds of the real inputs differ: %v and %v", d1, d2)
	}
	t.Logf("image index %v, archive %d bytes", d1, len(a1))
	archive := filepath.Join(work, "weftd-image.tar")
	if err := os.WriteFile(archive, a1, 0o644); err != nil {
		t.Fatal(err)
	}

	c := startContainerd(t)
	ref := "docker.io/weftnet/weftd:test"
	if _, err := c.ctr(ctx, "images", "import", archive); err != nil {
		t.Fatal(err)
	}
	// The imported image keeps the digest built here (the OCI layout is imported as is),
	// under its tag and under repo@digest, the name the CRI resolves a pinned reference to.
	checkImported(t, c, []string{ref, "docker.io/weftnet/weftd@" + d1.String()}, d1, host.String())

	// make image's archive, every platform in one index, imports too; its host image runs.
	if _, err := c.ctr(ctx, "images", "import", built); err != nil {
		t.Fatal(err)
	}
	builtRef, builtDigest, err := archiveIndex(built)
	if err != nil {
		t.Fatal(err)
	}
	repo, version := builtRef[:strings.LastIndexByte(builtRef, ':')], builtRef[strings.LastIndexByte(builtRef, ':')+1:]
	checkImported(t, c, []string{builtRef, repo + "@" + builtDigest.String()}, builtDigest, host.String())
	if out, err := c.ctr(ctx, "run", "--rm", repo+"@"+builtDigest.String(), "weft-built", "/opt/bin/weftd", "--version"); err != nil || !strings.Contains(out, "weftd "+version+" ") {
		t.Errorf("weftd --version in %s: %q %v", builtRef, out, err)
	}

	hostCNI := filepath.Join(work, "opt-cni-bin")
	if err := os.Mkdir(hostCNI, 0o755); err != nil {
		t.Fatal(err)
	}
	// The install-cni step reads the ConfigMap as the kubelet mounts it: the key is a
	// symlink into a ..data directory, mounted read-only.
	cfgDir, netd := filepath.Join(work, "kube-flannel-cfg"), filepath.Join(work, "net.d")
	conflist := `{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"flannel"}]}`
	for _, d := range []string{filepath.Join(cfgDir, "..2026_01_01"), netd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "..2026_01_01", "cni-conf.json"), []byte(conflist), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"..data": "..2026_01_01", "cni-conf.json": "..data/cni-conf.json"} {
		if err := os.Symlink(target, filepath.Join(cfgDir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name string
		opts []string
		cmd  []string
		want string
	}{
		{"weftd version", nil, []string{"/opt/bin/weftd", "--version"}, "weftd "},
		{"weftd help", nil, []string{"weftd", "--help"}, "-kube-subnet-mgr"},
		// Without CNI_COMMAND the plugin names the spec versions it speaks.
		{"CNI plugin versions", nil, []string{"/flannel"}, "CNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0"},
		{"iptables version", nil, []string{"iptables", "--version"}, "(nf_tables)"},
		{"iptables nat table", []string{"--cap-add", "CAP_NET_ADMIN"}, []string{"iptables", "-w", "5", "-t", "nat", "-S", "POSTROUTING"}, "-P POSTROUTING ACCEPT"},
		{"iptables-restore", []string{"--cap-add", "CAP_NET_ADMIN"}, []string{"iptables-restore", "--version"}, "(nf_tables)"},
		{"iptables legacy", []string{"--cap-add", "CAP_NET_ADMIN"}, []string{"iptables-legacy", "-w", "5", "-t", "nat", "-S", "POSTROUTING"}, "-P POSTROUTING ACCEPT"},
		// weftd runs each backend's commands by name (firewall.DetectIPTablesMode).
		{"iptables-legacy-save", []string{"--cap-add", "CAP_NET_ADMIN"}, []string{"iptables-legacy-save"}, ""},
		{"ip6tables-legacy-restore", nil, []string{"ip6tables-legacy-restore", "--version"}, "(legacy)"},
		{"iptables-nft-save", []string{"--cap-add", "CAP_NET_ADMIN"}, []string{"iptables-nft-save"}, ""},
		{"ip6tables-nft-restore", nil, []string{"ip6tables-nft-restore", "--version"}, "(nf_tables)"},
		// EnableNFTables: nft, with the libraries it needs, writes and lists a table.
		{"nft version", nil, []string{"nft", "--version"}, "nftables v"},
		{"nft table", []string{"--cap-add", "CAP_NET_ADMIN"}, []string{"nft", "add table ip weft-image-test; list tables"}, "table ip weft-image-test"},
		{"install CNI plugin", []string{"--mount", "type=bind,src=" + hostCNI + ",dst=/opt/cni/bin,options=rbind:rw"},
			[]string{"weft-install", "/flannel", "/opt/cni/bin/flannel"}, ""},
		{"install CNI config", []string{
			"--mount", "type=bind,src=" + cfgDir + ",dst=/etc/kube-flannel,options=rbind:ro",
			"--mount", "type=bind,src=" + netd + ",dst=/etc/cni/net.d,options=rbind:rw"},
			[]string{"weft-install", "-mode", "0644", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", "--rm"}, tt.opts...)
			args = append(args, ref, "weft-e2e")
			out, err := c.ctr(ctx, append(args, tt.cmd...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("%s printed %q, want it to contain %q", strings.Join(tt.cmd, " "), out, tt.want)
			}
		})
	}
	got, err := os.ReadFile(filepath.Join(hostCNI, "flannel"))
	if err != nil {
		t.Fatalf("the install step left no plugin on the host: %v", err)
	}
	want, err := os.ReadFile(cniPlugin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("installed plugin (%d bytes) differs from %s (%d bytes)", len(got), cniPlugin, len(want))
	}
	conf := filepath.Join(netd, "10-flannel.conflist")
	if got, err := os.ReadFile(conf); err != nil || string(got) != conflist {
		t.Errorf("installed CNI config %q (%v), want %q", got, err, conflist)
	}
	if st, err := os.Stat(conf); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("installed CNI config: %v %v, want mode 0644", st.Mode(), err)
	}
	// A container without NET_ADMIN must not reach the nat table: the capability the
	// manifest adds is the one that matters.
	if out, err := c.ctr(ctx, "run", "--rm", ref, "weft-e2e", "iptables", "-w", "5", "-t", "nat", "-S"); err == nil {
		t.Errorf("iptables without NET_ADMIN succeeded: %s", out)
	}
}

// checkImported checks `ctr images ls` lists each of names with the index digest and
// the host's platform among its platforms.
func checkImported(t *testing.T, c *ctrd, names []string, digest v1.Hash, host string) {
	t.Helper()
	list, err := c.ctr(context.Background(), "images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		found := false
		for _, line := range strings.Split(list, "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == n {
				found = true
				if !strings.Contains(line, digest.String()) || !strings.Contains(line, host) {
					t.Errorf("ctr images ls: %s, want %s with %s", line, digest, host)
				}
			}
		}
		if !found {
			t.Errorf("ctr images ls does not list %s:\n%s", n, list)
		}
	}
}
