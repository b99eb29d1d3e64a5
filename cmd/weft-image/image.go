package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image. weftd sits where kube-flannel's image keeps flanneld; the
// flannel CNI plugin where kube-flannel's CNI plugin image keeps it.
const (
	weftdPath     = "opt/bin/weftd"
	installPath   = "opt/bin/weft-install"
	cniPluginPath = "flannel"
)

// iptablesNames are the commands that Debian's iptables package reaches through
// update-alternatives (run by its postinst script, which an image build does not run);
// the image links them to their nft or legacy variants itself.
var iptablesNames = []string{"iptables", "iptables-save", "iptables-restore",
	"ip6tables", "ip6tables-save", "ip6tables-restore"}

// requiredCommands are what weftd runs, which the .debs must hold: both backends'
// iptables commands (weftd picks the host's, firewall.DetectIPTablesMode) and nft
// (EnableNFTables).
func requiredCommands() []string {
	cmds := []string{"nft"}
	for _, mode := range []string{"legacy", "nft"} {
		for _, n := range iptablesNames {
			cmds = append(cmds, modeCommand(n, mode))
		}
	}
	return cmds
}

// modeCommand is the name of command n in mode: iptables-save -> iptables-nft-save.
func modeCommand(n, mode string) string {
	cmd, verb, _ := strings.Cut(n, "-")
	target := cmd + "-" + mode
	if verb != "" {
		target += "-" + verb
	}
	return target
}

// spec is everything an image is made from: same spec, same image, byte for byte.
type spec struct {
	Weftd, Install, CNIPlugin string   // static binaries
	Debs                      []string // .deb files: iptables, nftables and their libraries
	IptablesMode              string   // "nft" or "legacy": what plain `iptables` runs
	Platform                  platform // of the binaries and the .debs
	Created                   time.Time
	Version                   string // label org.opencontainers.image.version
}

// layerSource is one layer's content and how its history entry describes it.
type layerSource struct {
	tree    *tree
	comment string
}

// build assembles the image: a layer of Debian packages, one with the flannel CNI
// plugin and one with weftd, in that order (weftd changes most often).
func build(ctx context.Context, s spec) (v1.Image, error) {
	if s.IptablesMode != "nft" && s.IptablesMode != "legacy" {
		return nil, fmt.Errorf("iptables mode %q: want nft or legacy", s.IptablesMode)
	}
	base := newTree(s.Created)
	var pkgs []string
	for _, f := range s.Debs {
		data, err := debData(ctx, f)
		if err != nil {
			return nil, err
		}
		if err := base.addTar(bytes.NewReader(data), skipDebPath); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		pkgs = append(pkgs, strings.SplitN(baseName(f), "_", 2)[0])
	}
	for _, c := range requiredCommands() {
		if !base.has("usr/sbin/" + c) {
			return nil, fmt.Errorf("usr/sbin/%s is in none of the .debs (are iptables and nftables among them?)", c)
		}
	}
	// Debian 13's packages install into usr only; its base-files would link the old
	// top-level directories there (the program interpreter is /lib/ld-linux-*.so.*).
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		if !base.has(d) && base.has("usr/"+d) {
			if err := base.addSymlink(d, "usr/"+d); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range iptablesNames {
		// iptables-save -> iptables-nft-save, as update-alternatives links them.
		if err := base.addSymlink("usr/sbin/"+n, modeCommand(n, s.IptablesMode)); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"tmp", "run", "etc/cni/net.d", "opt/cni/bin"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := base.add(tarDir(d, mode), nil); err != nil {
			return nil, err
		}
	}

	cni := newTree(s.Created)
	if err := addBinary(cni, cniPluginPath, s.CNIPlugin); err != nil {
		return nil, err
	}
	weft := newTree(s.Created)
	if err := addBinary(weft, weftdPath, s.Weftd); err != nil {
		return nil, err
	}
	if err := addBinary(weft, installPath, s.Install); err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: s.Created}
	for _, l := range []layerSource{
		{base, "Debian packages: " + strings.Join(pkgs, " ") + "; iptables is iptables-" + s.IptablesMode},
		{cni, "the flannel CNI plugin at /" + cniPluginPath},
		{weft, "weftd at /" + weftdPath + ", weft-install at /" + installPath},
	} {
		layer, err := gzipLayer(l.tree)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: created, CreatedBy: "weft-image", Comment: l.comment},
		})
		if err != nil {
			return nil, err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = created
	cfg.OS = "linux"
	cfg.Architecture = s.Platform.GOARCH
	cfg.Variant = s.Platform.Variant
	cfg.Config.Entrypoint = []string{"/" + weftdPath}
	cfg.Config.Env = []string{"PATH=/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "weftd",
		"org.opencontainers.image.description": "weft overlay network daemon, a drop-in for flanneld",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     s.Version,
	}
	return mutate.ConfigFile(img, cfg)
}

// gzipLayer is t's tar as a layer, compressed once here (the best compression; Go's
// gzip writes no time or name, so the bytes depend on the content and Go's version).
func gzipLayer(t *tree) (v1.Layer, error) {
	raw, err := t.tar()
	if err != nil {
		return nil, err
	}
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(z.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
}

func tarDir(name string, mode int64) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}
}

// addBinary puts the executable file src at name (mode 0755).
func addBinary(t *tree, name, src string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return t.addFile(name, 0o755, data)
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }
