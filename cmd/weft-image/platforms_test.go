package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/weftnet/weft/bench/testenv"
)

// qemuNames are qemu-user's names of the architectures.
var qemuNames = map[string]string{"amd64": "x86_64", "arm64": "aarch64", "arm": "arm",
	"ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}

// TestPlatformsRun: every image of make image's index, other than the host's (which
// TestContainerdRunsImage runs in containerd), unpacked into a directory and run there
// under qemu-user in a chroot: weftd, the CNI plugin, iptables of both backends and nft
// start, so each architecture's binaries and Debian libraries load together (the
// program interpreter, the libraries' paths: Debian 13's riscv64 packages install into
// usr only). qemu-user emulates no netlink, so only --version is asked.
func TestPlatformsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("unpacks make image's archive: not in -short")
	}
	testenv.NeedRoot(t)
	archive := filepath.Join(os.Getenv("WEFT_BIN"), "weftd-image.tar")
	_, err := os.Stat(archive)
	testenv.Need(t, os.Getenv("WEFT_BIN") != "" && err == nil, "WEFT_BIN/weftd-image.tar (make image)")
	dir := filepath.Join(t.TempDir(), "oci")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// weftd says the version the archive is tagged with (make image's VERSION).
	ref, _, err := archiveIndex(archive)
	if err != nil {
		t.Fatal(err)
	}
	_, version := splitRef(ref)
	digest, err := writeLayout(archive, dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := l.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(platforms) {
		t.Errorf("index has %d images, want %d", len(im.Manifests), len(platforms))
	}
	for _, m := range im.Manifests {
		arch := m.Platform.Architecture
		if arch == runtime.GOARCH {
			continue
		}
		t.Run(arch, func(t *testing.T) {
			qemu := "/usr/bin/qemu-" + qemuNames[arch] + "-static"
			_, err := os.Stat(qemu)
			testenv.Need(t, err == nil, qemu+" (qemu-user-static)")
			img, err := idx.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if err := unpack(img, root); err != nil {
				t.Fatal(err)
			}
			q, err := os.ReadFile(qemu)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "qemu"), q, 0o755); err != nil {
				t.Fatal(err)
			}
			// The nf_tables commands open netlink even for --version; qemu-user refusing
			// it is their own message, so they loaded and ran.
			const noNetlink = "Protocol not supported"
			for _, tt := range []struct {
				cmd  string
				want []string
			}{
				{"/opt/bin/weftd --version", []string{"weftd " + version + " "}},
				{"/flannel", []string{"CNI protocol versions supported"}},
				{"/usr/sbin/iptables-legacy --version", []string{"(legacy)"}},
				{"/usr/sbin/ip6tables-legacy-save --version", []string{"(legacy)"}},
				{"/usr/sbin/iptables --version", []string{"(nf_tables)", "iptables: Failed to initialize nft: " + noNetlink}},
				{"/usr/sbin/iptables-nft-restore --version", []string{"(nf_tables)"}},
				{"/usr/sbin/nft --version", []string{"nftables v", "Unable to initialize Netlink socket: " + noNetlink}},
			} {
				args := append([]string{root, "/qemu"}, strings.Fields(tt.cmd)...)
				out, _ := exec.Command("chroot", args...).CombinedOutput()
				ok := false
				for _, w := range tt.want {
					ok = ok || strings.Contains(string(out), w)
				}
				if !ok {
					t.Errorf("%s on %s: %q, want it to contain one of %q", tt.cmd, arch, out, tt.want)
				}
			}
		})
	}
}

// unpack writes img's file system (its layers flattened) under root.
func unpack(img v1.Image, root string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeLink:
			err = os.Link(filepath.Join(root, filepath.Clean("/"+h.Linkname)), p)
		default:
			err = fmt.Errorf("unexpected tar type %q", h.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}
