package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/weftnet/weft/bench/testenv"
)

func TestFullRef(t *testing.T) {
	for _, tt := range []struct{ in, full, tag string }{
		{"weftnet/weftd:0.1.0", "docker.io/weftnet/weftd:0.1.0", "0.1.0"},
		{"weftd", "docker.io/library/weftd:latest", "latest"},
		{"docker.io/weftnet/weftd:1", "docker.io/weftnet/weftd:1", "1"},
		{"localhost:5000/weftd", "localhost:5000/weftd:latest", "latest"},
		{"registry.example/a/b:v2", "registry.example/a/b:v2", "v2"},
	} {
		full, tag, err := fullRef(tt.in)
		if err != nil || full != tt.full || tag != tt.tag {
			t.Errorf("fullRef(%q) = %q, %q, %v; want %q, %q", tt.in, full, tag, err, tt.full, tt.tag)
		}
	}
	for _, bad := range []string{"", "a b", "weftd@sha256:00", "weftd:", ":1"} {
		if _, _, err := fullRef(bad); err == nil {
			t.Errorf("fullRef(%q) succeeded, want an error", bad)
		}
	}
}

func TestParseDepends(t *testing.T) {
	out := []byte("iptables\n  Depends: libc6\n  Depends: <awk>\nlibc6\n  Depends: libgcc-s1\n<awk>\nlibgcc-s1\nlibc6\n")
	got := parseDepends(out)
	want := []string{"iptables", "libc6", "libgcc-s1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseDepends = %q, want %q", got, want)
	}
}

func TestSkipDebPath(t *testing.T) {
	for name, skip := range map[string]bool{
		"usr/share/doc/iptables/copyright":           false,
		"usr/share/doc/iptables/changelog.Debian.gz": true,
		"usr/share/doc/iptables":                     true,
		"usr/share/man/man8/iptables.8.gz":           true,
		"usr/lib/x86_64-linux-gnu/gconv/UTF-16.so":   true,
		"usr/lib/x86_64-linux-gnu/libxtables.so.12":  false,
		"usr/sbin/xtables-nft-multi":                 false,
		"usr/share/mandatory":                        false,
	} {
		if got := skipDebPath(name); got != skip {
			t.Errorf("skipDebPath(%q) = %v, want %v", name, got, skip)
		}
	}
}

func TestTree(t *testing.T) {
	tr := newTree(time.Unix(0, 0))
	if err := tr.addFile("./usr/sbin/b", 0o755, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := tr.addSymlink("usr/sbin/a", "b"); err != nil {
		t.Fatal(err)
	}
	// The same file again is fine; different content at the same path is not.
	if err := tr.addFile("usr/sbin/b", 0o755, []byte("b")); err != nil {
		t.Errorf("re-adding an equal file: %v", err)
	}
	if err := tr.addFile("usr/sbin/b", 0o755, []byte("c")); !errors.Is(err, errConflict) {
		t.Errorf("adding a different file at the same path: %v, want errConflict", err)
	}
	if err := tr.addFile("usr", 0o644, nil); !errors.Is(err, errConflict) {
		t.Errorf("a file over a directory: %v, want errConflict", err)
	}
	raw, err := tr.tar()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	r := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d/%d %q, mtime %v; want root, no names, epoch", h.Name, h.Uid, h.Gid, h.Uname, h.ModTime)
		}
	}
	want := []string{"usr/", "usr/sbin/", "usr/sbin/a", "usr/sbin/b"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("tar entries %q, want %q (sorted, parents first)", names, want)
	}
}

// fakeInputs writes small stand-ins for the binaries and a Debian package that holds
// the iptables commands of both backends and nft, built with dpkg-deb as a real .deb.
func fakeInputs(t *testing.T) (dir string, s spec) {
	t.Helper()
	testenv.NeedTools(t, "dpkg-deb")
	dir = t.TempDir()
	pkg := filepath.Join(dir, "pkg")
	for _, n := range []string{"iptables", "ip6tables"} {
		for _, v := range []string{"", "-save", "-restore"} {
			for _, mode := range []string{"nft", "legacy"} {
				p := filepath.Join(pkg, "usr/sbin", n+"-"+mode+v)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("#!"+mode), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := os.WriteFile(filepath.Join(pkg, "usr/sbin/nft"), []byte("#!nft"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: iptables\nVersion: 1.0\nArchitecture: all\nMaintainer: weft tests <t@example.org>\nDescription: test package\n"
	if err := os.WriteFile(filepath.Join(pkg, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(dir, "iptables_1.0_all.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -b: %v: %s", err, out)
	}
	for _, b := range []string{"weftd", "weft-install", "flannel"} {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("binary "+b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, spec{
		Weftd: filepath.Join(dir, "weftd"), Install: filepath.Join(dir, "weft-install"),
		CNIPlugin: filepath.Join(dir, "flannel"), Debs: []string{deb},
		IptablesMode: "nft", Arch: "amd64", Created: time.Unix(0, 0).UTC(), Version: "test",
	}
}

// buildArchive builds s and writes its archive, returning the digest and the bytes.
func buildArchive(t *testing.T, s spec) (v1.Hash, []byte) {
	t.Helper()
	img, err := build(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, img, "weftnet/weftd:test", s.Created); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d, buf.Bytes()
}

func TestBuildReproducible(t *testing.T) {
	dir, s := fakeInputs(t)
	d1, a1 := buildArchive(t, s)
	d2, a2 := buildArchive(t, s)
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: digests %v and %v", d1, d2)
	}
	if !bytes.Equal(a1, a2) {
		t.Errorf("two builds of the same inputs: archives differ (%d and %d bytes)", len(a1), len(a2))
	}
	// A file touched but unchanged leaves the image as it was: no mtime leaks in.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(s.Weftd, later, later); err != nil {
		t.Fatal(err)
	}
	if d, _ := buildArchive(t, s); d != d1 {
		t.Errorf("touching weftd changed the digest: %v, was %v", d, d1)
	}
	// Different inputs give a different image.
	if err := os.WriteFile(filepath.Join(dir, "weftd"), []byte("binary weftd v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if d, _ := buildArchive(t, s); d == d1 {
		t.Errorf("a changed weftd left the digest at %v", d)
	}
	legacy := s
	legacy.IptablesMode = "legacy"
	if d, _ := buildArchive(t, legacy); d == d1 {
		t.Errorf("iptables mode legacy left the digest at %v", d)
	}
	bad := s
	bad.IptablesMode = "auto"
	if _, err := build(context.Background(), bad); err == nil {
		t.Errorf("iptables mode %q accepted", bad.IptablesMode)
	}
}

// TestRequiredCommands: the image must carry what weftd runs in either backend and
// with EnableNFTables; a build whose .debs lack one fails instead of shipping an image
// that crash-loops.
func TestRequiredCommands(t *testing.T) {
	got := map[string]bool{}
	for _, c := range requiredCommands() {
		got[c] = true
	}
	for _, want := range []string{"nft", "iptables-legacy", "iptables-legacy-restore", "iptables-legacy-save",
		"ip6tables-legacy", "ip6tables-legacy-restore", "ip6tables-legacy-save", "iptables-nft", "iptables-nft-restore",
		"iptables-nft-save", "ip6tables-nft", "ip6tables-nft-restore", "ip6tables-nft-save"} {
		if !got[want] {
			t.Errorf("requiredCommands lacks %s", want)
		}
	}
	dir, s := fakeInputs(t)
	// The same package without nft.
	pkg := filepath.Join(dir, "pkg")
	if err := os.Remove(filepath.Join(pkg, "usr/sbin/nft")); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(dir, "iptables_0.9_all.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -b: %v: %s", err, out)
	}
	s.Debs = []string{deb}
	if _, err := build(context.Background(), s); err == nil || !strings.Contains(err.Error(), "usr/sbin/nft") {
		t.Errorf("a build without nft: %v, want an error naming usr/sbin/nft", err)
	}
}

func TestImageContent(t *testing.T) {
	_, s := fakeInputs(t)
	img, err := build(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// ctr import drops images without a platform; runtimes need an entrypoint.
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/opt/bin/weftd"}) {
		t.Errorf("entrypoint %q", cfg.Config.Entrypoint)
	}
	if !cfg.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("created %v, want the epoch", cfg.Created)
	}
	files := map[string]*tar.Header{}
	content := map[string]string{}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
			b, _ := io.ReadAll(tr)
			content[h.Name] = string(b)
		}
		rc.Close()
	}
	for name, want := range map[string]string{
		"opt/bin/weftd":        "binary weftd",
		"opt/bin/weft-install": "binary weft-install",
		"flannel":              "binary flannel",
	} {
		h := files[name]
		if h == nil || content[name] != want || h.Mode != 0o755 {
			t.Errorf("%s: %+v %q; want mode 0755 with %q", name, h, content[name], want)
		}
	}
	for _, name := range []string{"usr/sbin/iptables", "usr/sbin/iptables-restore", "usr/sbin/ip6tables-save"} {
		h := files[name]
		if h == nil || h.Typeflag != tar.TypeSymlink {
			t.Errorf("%s: %+v, want a symlink", name, h)
			continue
		}
		if _, ok := files["usr/sbin/"+h.Linkname]; !ok || !bytes.Contains([]byte(h.Linkname), []byte("-nft")) {
			t.Errorf("%s -> %s: want an nft command that is in the image", name, h.Linkname)
		}
	}
	// weftd runs both backends' commands by name (the host's backend) and nft.
	for _, name := range requiredCommands() {
		if h := files["usr/sbin/"+name]; h == nil || h.Mode&0o111 == 0 {
			t.Errorf("usr/sbin/%s: %+v, want an executable", name, h)
		}
	}
	if h := files["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp/: %+v, want mode 1777", h)
	}
	for _, d := range []string{"etc/cni/net.d/", "opt/cni/bin/", "run/"} {
		if files[d] == nil {
			t.Errorf("%s missing", d)
		}
	}
}

func TestArchiveLayout(t *testing.T) {
	_, s := fakeInputs(t)
	d, raw := buildArchive(t, s)
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	for _, want := range []string{"oci-layout", "index.json", "manifest.json", "blobs/sha256/" + d.Hex} {
		if _, ok := files[want]; !ok {
			t.Errorf("%s missing from the archive", want)
		}
	}
	for _, want := range [][]byte{[]byte(`"io.containerd.image.name":"docker.io/weftnet/weftd:test"`), []byte(d.String())} {
		if !bytes.Contains(files["index.json"], want) {
			t.Errorf("index.json %s lacks %s", files["index.json"], want)
		}
	}
	if !bytes.Contains(files["manifest.json"], []byte(`"RepoTags":["docker.io/weftnet/weftd:test"]`)) {
		t.Errorf("manifest.json %s lacks the tag", files["manifest.json"])
	}
}
