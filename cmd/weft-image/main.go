// Command weft-image builds the OCI image of weftd without a container daemon or a
// registry: static weftd, weft-install and weft's flannel CNI plugin (cmd/weft-cni),
// plus iptables (both backends), nft and the libraries they need from Debian's packages,
// written as one tar that `ctr images import` and `docker load` read. The build is
// reproducible: the same inputs give the same image digest and the same archive bytes.
//
//	weft-image -o bin/weftd-image.tar -weftd bin/image/weftd -install bin/image/weft-install \
//	    -cni bin/image/weft-cni -debs bin/image/debs
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// defaultRef is the name the image is imported under; deploy/weft.yml uses it.
const defaultRef = "docker.io/weftnet/weftd:0.1.0"

// defaultPackages are the Debian packages the image carries: iptables (legacy and nft
// backends) for weftd's iptables rules, nftables (nft) for EnableNFTables.
const defaultPackages = "iptables,nftables"

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "weft-image:", err)
		os.Exit(1)
	}
}

type options struct {
	out, ref                string
	weftd, install, cni     string
	debDir, packages, iptab string
	arch                    string
	epoch                   int64
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("weft-image", flag.ContinueOnError)
	fs.StringVar(&o.out, "o", "", "write the image archive here (required)")
	fs.StringVar(&o.ref, "tag", defaultRef, "image reference stored in the archive")
	fs.StringVar(&o.weftd, "weftd", "", "static weftd binary (required)")
	fs.StringVar(&o.install, "install", "", "static weft-install binary (required)")
	fs.StringVar(&o.cni, "cni", "", "static flannel CNI plugin binary, installed as /flannel (make image: cmd/weft-cni) (required)")
	fs.StringVar(&o.debDir, "debs", "", "directory of cached .debs; missing ones are fetched with apt-get download (required)")
	fs.StringVar(&o.packages, "packages", defaultPackages, "Debian packages to put in the image, with their dependencies (comma separated)")
	fs.StringVar(&o.iptab, "iptables", "nft", "what plain iptables runs: nft or legacy (weftd itself runs iptables-legacy or iptables-nft, as the host's rules are; see --iptables-mode)")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "architecture of the binaries")
	fs.Int64Var(&o.epoch, "epoch", epochDefault(), "timestamp of every file and of the image, seconds since 1970 (default $SOURCE_DATE_EPOCH or 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for name, v := range map[string]string{"o": o.out, "weftd": o.weftd, "install": o.install, "cni": o.cni, "debs": o.debDir} {
		if v == "" {
			return fmt.Errorf("-%s is required", name)
		}
	}
	pkgs, err := resolveDebs(ctx, strings.Split(o.packages, ","))
	if err != nil {
		return err
	}
	debs, err := fetchDebs(ctx, o.debDir, pkgs)
	if err != nil {
		return err
	}
	_, tag, err := fullRef(o.ref)
	if err != nil {
		return err
	}
	img, err := build(ctx, spec{
		Weftd: o.weftd, Install: o.install, CNIPlugin: o.cni, Debs: debs,
		IptablesMode: o.iptab, Arch: o.arch, Created: time.Unix(o.epoch, 0).UTC(), Version: tag,
	})
	if err != nil {
		return err
	}
	size, err := writeFile(o.out, func(w io.Writer) error {
		return writeArchive(w, img, o.ref, time.Unix(o.epoch, 0).UTC())
	})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	var layers int64
	ls, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range ls {
		n, err := l.Size()
		if err != nil {
			return err
		}
		layers += n
	}
	full, _, _ := fullRef(o.ref)
	fmt.Fprintf(stdout, "%s %s\n%s: %d bytes (%.1f MiB; compressed layers %.1f MiB)\n",
		full, digest, o.out, size, float64(size)/(1<<20), float64(layers)/(1<<20))
	return nil
}

func epochDefault() int64 {
	if v, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		return v
	}
	return 0
}

// writeFile writes path through a temporary file and a rename, so a failed build
// leaves no half archive behind; it returns the size written.
func writeFile(path string, write func(io.Writer) error) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return 0, err
	}
	st, err := tmp.Stat()
	if err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	return st.Size(), os.Rename(tmp.Name(), path)
}
