// Command weft-image builds the OCI image of weftd without a container daemon or a
// registry, for every architecture kube-flannel ships: per architecture, static weftd,
// weft-install and weft's flannel CNI plugin (cmd/weft-cni), plus iptables (both
// backends), nft and the libraries they need from Debian's packages of that
// architecture, exactly the versions of a lock file; all in one OCI image index,
// written as one tar that `ctr images import` and `docker load` read. The build is
// reproducible: the same inputs give the same digests and the same archive bytes.
//
//	weft-image -o bin/weftd-image.tar -tag ghcr.io/weftnet/weftd:0.1.0 -bins bin/image    # bin/image/<GOARCH>/{weftd,weft-install,weft-cni}
//	weft-image lock                                       # re-resolve the .debs, rewrite the lock
//	weft-image pin [-check] -image bin/weftd-image.tar deploy/weft.yml …
//	weft-image layout -image bin/weftd-image.tar -o DIR   # an OCI layout for crane push
//	weft-image release -version 0.1.0 -bins DIR -o bin/release/0.1.0 -sbom 'go run …'  # make release
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// imageRepo is the repository weft's image is named in; the tag is the version
// (make image and make release pass imageRepo:VERSION as -tag), and deploy/weft.yml
// names it with the index digest (weft-image pin).
const imageRepo = "ghcr.io/weftnet/weftd"

// defaultPackages are the Debian packages the image carries: iptables (legacy and nft
// backends) for weftd's iptables rules, nftables (nft) for EnableNFTables.
const defaultPackages = "iptables,nftables"

// defaultLock is the lock file, relative to the module's root (make runs there).
const defaultLock = "cmd/weft-image/debs.lock"

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "weft-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "lock":
			return runLock(ctx, args[1:], stdout)
		case "pin":
			return runPin(args[1:], stdout)
		case "layout":
			return runLayout(args[1:], stdout)
		case "release":
			return runRelease(ctx, args[1:], stdout)
		}
	}
	return runBuild(ctx, args, stdout)
}

// defaultCache is where .debs and the private apt state are kept: outside the clone,
// so a clean checkout on the same machine finds them.
func defaultCache() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "weft-cache")
	}
	return filepath.Join(d, "weft")
}

// selectPlatforms parses a comma-separated list of architectures; "" is all of them.
func selectPlatforms(list string) ([]platform, error) {
	if strings.Trim(list, ", ") == "" {
		return platforms, nil
	}
	var ps []platform
	for _, a := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' }) {
		p, err := findPlatform(strings.TrimPrefix(a, "linux/"))
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// imageOpts says what to build an image archive from: the binaries in
// bins/<GOARCH>/, the .debs of the lock (fetched into cache), for the platforms given.
type imageOpts struct {
	out, ref, bins, lock, cache, iptables string
	platforms                             []platform
	epoch                                 int64
}

// addImageFlags defines the flags of an image build, but -o and -tag, on fs.
func addImageFlags(fs *flag.FlagSet, o *imageOpts, archs *string) {
	fs.StringVar(&o.lock, "lock", defaultLock, "lock file naming the .debs of each architecture")
	fs.StringVar(&o.cache, "cache", defaultCache(), "cache of .debs (debs/) and of the private apt state (apt/)")
	fs.StringVar(archs, "platforms", "", "architectures to build, separated by commas or spaces (default: all of "+archNames()+")")
	fs.StringVar(&o.iptables, "iptables", "nft", "what plain iptables runs: nft or legacy (weftd itself runs iptables-legacy or iptables-nft, as the host's rules are; see --iptables-mode)")
	fs.Int64Var(&o.epoch, "epoch", epochDefault(), "timestamp of every file and of the image, seconds since 1970 (default $SOURCE_DATE_EPOCH or 0)")
}

func runBuild(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("weft-image", flag.ContinueOnError)
	var o imageOpts
	var archs string
	fs.StringVar(&o.out, "o", "", "write the image archive here (required)")
	fs.StringVar(&o.ref, "tag", "", "image reference stored in the archive, "+imageRepo+":VERSION (required; make image passes its VERSION)")
	fs.StringVar(&o.bins, "bins", "", "directory with <GOARCH>/weftd, <GOARCH>/weft-install and <GOARCH>/weft-cni, static binaries (required)")
	addImageFlags(fs, &o, &archs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.out == "" || o.bins == "" || o.ref == "" {
		return errors.New("-o, -tag and -bins are required")
	}
	var err error
	if o.platforms, err = selectPlatforms(archs); err != nil {
		return err
	}
	_, err = buildImage(ctx, o, stdout)
	return err
}

// buildImage writes the image archive o describes and returns its index digest.
func buildImage(ctx context.Context, o imageOpts, stdout io.Writer) (v1.Hash, error) {
	lock, err := readLock(o.lock)
	if err != nil {
		return v1.Hash{}, err
	}
	full, tag, err := fullRef(o.ref)
	if err != nil {
		return v1.Hash{}, err
	}
	created := time.Unix(o.epoch, 0).UTC()
	var specs []spec
	for _, p := range o.platforms {
		debs, err := fetchLocked(ctx, o.cache, p, lock, os.Stderr)
		if err != nil {
			return v1.Hash{}, err
		}
		dir := filepath.Join(o.bins, p.GOARCH)
		specs = append(specs, spec{
			Weftd: filepath.Join(dir, "weftd"), Install: filepath.Join(dir, "weft-install"),
			CNIPlugin: filepath.Join(dir, "weft-cni"), Debs: debs,
			IptablesMode: o.iptables, Platform: p, Created: created, Version: tag,
		})
	}
	idx, imgs, err := buildIndex(ctx, specs)
	if err != nil {
		return v1.Hash{}, err
	}
	host := imgs[0]
	for i, s := range specs {
		if s.Platform.GOARCH == runtime.GOARCH {
			host = imgs[i]
		}
	}
	size, err := writeFile(o.out, func(w io.Writer) error {
		return writeArchive(w, idx, host, o.ref, created)
	})
	if err != nil {
		return v1.Hash{}, err
	}
	for i, img := range imgs {
		d, err := img.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		n, err := imageSize(img)
		if err != nil {
			return v1.Hash{}, err
		}
		fmt.Fprintf(stdout, "%-14s %s  %5.1f MiB compressed\n", specs[i].Platform, d, float64(n)/(1<<20))
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	fmt.Fprintf(stdout, "%s: %d bytes (%.1f MiB)\nindex %s@%s\n", o.out, size, float64(size)/(1<<20), full, digest)
	return digest, nil
}

// runLock resolves the image's packages for every architecture as Debian has them
// now, fetches them and writes the lock file.
func runLock(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("weft-image lock", flag.ContinueOnError)
	lockFile := fs.String("lock", defaultLock, "lock file to write")
	cache := fs.String("cache", defaultCache(), "cache of .debs (debs/) and of the private apt state (apt/)")
	packages := fs.String("packages", defaultPackages, "Debian packages to put in the image, with their dependencies (comma separated)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var all []lockEntry
	for _, p := range platforms {
		entries, err := lockPlatform(ctx, *cache, p, strings.Split(*packages, ","), os.Stderr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %d packages from Debian %s\n", p, len(entries), p.Release)
		all = append(all, entries...)
	}
	_, err := writeFile(*lockFile, func(w io.Writer) error {
		_, err := w.Write(formatLock(all))
		return err
	})
	return err
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
