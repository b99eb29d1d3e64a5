package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

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
		"usr/lib/riscv64-linux-gnu/gconv":            true,
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
		IptablesMode: "nft", Platform: platforms[0], Created: time.Unix(0, 0).UTC(), Version: "test",
	}
}

// buildArchive builds the index of specs and writes its archive (the first spec's
// image as docker's), returning the index digest and the bytes.
func buildArchive(t *testing.T, specs ...spec) (v1.Hash, []byte) {
	t.Helper()
	idx, imgs, err := buildIndex(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, idx, imgs[0], "weftnet/weftd:test", specs[0].Created); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d, buf.Bytes()
}

// withPlatform is s for another architecture (the fake binaries stand for any).
func withPlatform(t *testing.T, s spec, arch string) spec {
	t.Helper()
	p, err := findPlatform(arch)
	if err != nil {
		t.Fatal(err)
	}
	s.Platform = p
	return s
}

// TestBuildReproducible: the same inputs give the same index digest and the same
// archive bytes; any changed input, on any platform, gives another index.
func TestBuildReproducible(t *testing.T) {
	dir, s := fakeInputs(t)
	arm := withPlatform(t, s, "arm")
	d1, a1 := buildArchive(t, s, arm)
	d2, a2 := buildArchive(t, s, arm)
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: index digests %v and %v", d1, d2)
	}
	if !bytes.Equal(a1, a2) {
		t.Errorf("two builds of the same inputs: archives differ (%d and %d bytes)", len(a1), len(a2))
	}
	// A file touched but unchanged leaves the image as it was: no mtime leaks in.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(s.Weftd, later, later); err != nil {
		t.Fatal(err)
	}
	if d, _ := buildArchive(t, s, arm); d != d1 {
		t.Errorf("touching weftd changed the index digest: %v, was %v", d, d1)
	}
	if d, _ := buildArchive(t, arm, s); d == d1 {
		t.Errorf("the platforms in another order left the index digest at %v", d)
	}
	if _, _, err := buildIndex(context.Background(), []spec{s, s}); err == nil {
		t.Errorf("an index with linux/amd64 twice was built")
	}
	legacy := s
	legacy.IptablesMode = "legacy"
	if d, _ := buildArchive(t, legacy, arm); d == d1 {
		t.Errorf("iptables mode legacy left the index digest at %v", d)
	}
	// A changed binary of one platform changes the index.
	v2 := filepath.Join(dir, "weftd-arm")
	if err := os.WriteFile(v2, []byte("binary weftd v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	arm2 := arm
	arm2.Weftd = v2
	if d, _ := buildArchive(t, s, arm2); d == d1 {
		t.Errorf("a changed arm weftd left the index digest at %v", d)
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

// TestArchiveLayout: the archive holds the OCI layout of the index, naming it by tag
// and by digest, every platform's blobs, and docker's manifest.json for the host's
// image; archiveIndex reads the digest back.
func TestArchiveLayout(t *testing.T) {
	_, s := fakeInputs(t)
	arm := withPlatform(t, s, "arm")
	d, raw := buildArchive(t, s, arm)
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
	for _, want := range []string{`"io.containerd.image.name":"docker.io/weftnet/weftd:test"`,
		`"io.containerd.image.name":"docker.io/weftnet/weftd@` + d.String() + `"`,
		`"mediaType":"application/vnd.oci.image.index.v1+json"`} {
		if !bytes.Contains(files["index.json"], []byte(want)) {
			t.Errorf("index.json %s lacks %s", files["index.json"], want)
		}
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(files["blobs/sha256/"+d.Hex], &idx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range idx.Manifests {
		got = append(got, m.Platform.OS+"/"+m.Platform.Architecture+"/"+m.Platform.Variant)
		var man v1.Manifest
		if err := json.Unmarshal(files["blobs/sha256/"+m.Digest.Hex], &man); err != nil {
			t.Fatalf("%s: %v", m.Digest, err)
		}
		for _, l := range append(man.Layers, man.Config) {
			if _, ok := files["blobs/sha256/"+l.Digest.Hex]; !ok {
				t.Errorf("%s: blob %s missing", m.Platform, l.Digest)
			}
		}
	}
	if want := []string{"linux/amd64/", "linux/arm/v7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("index platforms %q, want %q", got, want)
	}
	var docker []dockerManifest
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil {
		t.Fatal(err)
	}
	if len(docker) != 1 || !reflect.DeepEqual(docker[0].RepoTags, []string{"docker.io/weftnet/weftd:test"}) {
		t.Fatalf("manifest.json %s: want one image tagged docker.io/weftnet/weftd:test", files["manifest.json"])
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(files[docker[0].Config], &cfg); err != nil || cfg.Architecture != "amd64" {
		t.Errorf("manifest.json's image: architecture %q (%v), want the first spec's, amd64", cfg.Architecture, err)
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if ref, got, err := archiveIndex(path); err != nil || got != d || ref != "docker.io/weftnet/weftd:test" {
		t.Errorf("archiveIndex = %q, %v, %v; want docker.io/weftnet/weftd:test, %v", ref, got, err, d)
	}

	// docker load reads manifest.json, as go-containerregistry's tarball does: the
	// host's image, by its tag, with the digest it has in the index.
	tag, err := name.NewTag("docker.io/weftnet/weftd:test")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("reading the archive as docker save's: %v", err)
	}
	var amd64Manifest v1.Manifest
	if err := json.Unmarshal(files["blobs/sha256/"+idx.Manifests[0].Digest.Hex], &amd64Manifest); err != nil {
		t.Fatal(err)
	}
	// Docker's image ID is the config's digest (it writes a manifest of its own).
	if got, err := loaded.ConfigName(); err != nil || got != amd64Manifest.Config.Digest {
		t.Errorf("docker's image ID %v (%v), want the index's linux/amd64 config %v", got, err, amd64Manifest.Config.Digest)
	}
	if ls, err := loaded.Layers(); err != nil || len(ls) != len(amd64Manifest.Layers) {
		t.Errorf("docker's image: %d layers (%v), want %d", len(ls), err, len(amd64Manifest.Layers))
	}

	// The layout for crane: one entry, the index, which go-containerregistry reads back
	// with the same digest and both platforms.
	dir := filepath.Join(t.TempDir(), "oci")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := writeLayout(path, dir); err != nil {
		t.Fatal(err)
	}
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(lm.Manifests) != 1 || lm.Manifests[0].Digest != d {
		t.Fatalf("layout index.json %+v, want one entry %v", lm.Manifests, d)
	}
	li, err := l.ImageIndex(d)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := li.Digest(); err != nil || got != d {
		t.Errorf("layout's index digest %v (%v), want %v", got, err, d)
	}
	lim, err := li.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range lim.Manifests {
		img, err := li.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate.Image(img); err != nil {
			t.Errorf("%s in the layout: %v", m.Platform, err)
		}
	}
}
