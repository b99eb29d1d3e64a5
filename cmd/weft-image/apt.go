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
	"strings"
)

// platform is one architecture of the image: Go's name for it, the OCI platform's, and
// the Debian architecture and release its firewall userland comes from.
type platform struct {
	GOARCH, Variant string // OCI architecture is GOARCH; Variant "v7" for 32-bit arm
	DebArch         string
	Release         string // a key of releases
}

// platforms are kube-flannel's architectures. Debian 12 has no riscv64 port (it was
// an unofficial one until Debian 13): riscv64 takes Debian 13's packages.
var platforms = []platform{
	{GOARCH: "amd64", DebArch: "amd64", Release: "bookworm"},
	{GOARCH: "arm64", DebArch: "arm64", Release: "bookworm"},
	{GOARCH: "arm", Variant: "v7", DebArch: "armhf", Release: "bookworm"},
	{GOARCH: "ppc64le", DebArch: "ppc64el", Release: "bookworm"},
	{GOARCH: "s390x", DebArch: "s390x", Release: "bookworm"},
	{GOARCH: "riscv64", DebArch: "riscv64", Release: "trixie"},
}

// String is the platform as OCI and docker write it: linux/arm/v7.
func (p platform) String() string {
	s := "linux/" + p.GOARCH
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// releases are the apt sources of each Debian release the image uses.
var releases = map[string][]string{
	"bookworm": {
		"http://deb.debian.org/debian bookworm main",
		"http://deb.debian.org/debian bookworm-updates main",
		"http://deb.debian.org/debian-security bookworm-security main",
	},
	"trixie": {
		"http://deb.debian.org/debian trixie main",
		"http://deb.debian.org/debian trixie-updates main",
		"http://deb.debian.org/debian-security trixie-security main",
	},
}

const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// findPlatform returns the platform of a GOARCH or a Debian architecture.
func findPlatform(arch string) (platform, error) {
	for _, p := range platforms {
		if p.GOARCH == arch || p.DebArch == arch {
			return p, nil
		}
	}
	return platform{}, fmt.Errorf("architecture %q: want one of %s", arch, archNames())
}

func archNames() string {
	var n []string
	for _, p := range platforms {
		n = append(n, p.GOARCH)
	}
	return strings.Join(n, ", ")
}

// aptRepo is apt for one Debian architecture with its own sources, package lists and
// state under dir, apart from the machine's: APT::Architecture is the target's, so
// dependencies (Multi-Arch: foreign ones too) resolve to its packages, and neither
// the machine's sources nor its dpkg architectures change.
type aptRepo struct {
	dir string
	p   platform
}

func newAptRepo(cache string, p platform) (*aptRepo, error) {
	r := &aptRepo{dir: filepath.Join(cache, "apt", p.DebArch), p: p}
	for _, d := range []string{"lists/partial", "archives/partial", "parts", "preferences.d"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	var src strings.Builder
	for _, s := range releases[p.Release] {
		fmt.Fprintf(&src, "deb [signed-by=%s] %s\n", keyring, s)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "sources.list"), []byte(src.String()), 0o644); err != nil {
		return nil, err
	}
	// An empty dpkg status: nothing is installed in the image being resolved.
	if err := os.WriteFile(filepath.Join(r.dir, "status"), nil, 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

// opts are the apt options that make apt use r's directories and architecture.
func (r *aptRepo) opts() []string {
	var o []string
	for k, v := range map[string]string{
		"Dir::State":                 r.dir,
		"Dir::State::Lists":          filepath.Join(r.dir, "lists"),
		"Dir::State::status":         filepath.Join(r.dir, "status"),
		"Dir::Cache":                 r.dir,
		"Dir::Cache::archives":       filepath.Join(r.dir, "archives"),
		"Dir::Etc::SourceList":       filepath.Join(r.dir, "sources.list"),
		"Dir::Etc::SourceParts":      filepath.Join(r.dir, "parts"),
		"Dir::Etc::Preferences":      "/dev/null",
		"Dir::Etc::PreferencesParts": filepath.Join(r.dir, "preferences.d"),
		"APT::Architecture":          r.p.DebArch,
		"APT::Architectures":         r.p.DebArch,
		"APT::Sandbox::User":         "root",
		"Acquire::Languages":         "none",
	} {
		o = append(o, "-o", k+"="+v)
	}
	return o
}

// run runs an apt command (apt-get or apt-cache) with r's options in dir.
func (r *aptRepo) run(ctx context.Context, dir, cmd string, args ...string) ([]byte, error) {
	c := exec.CommandContext(ctx, cmd, append(r.opts(), args...)...)
	c.Dir = dir
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s (%s, Debian %s): %w: %s", cmd, strings.Join(args, " "),
			r.p.DebArch, r.p.Release, err, bytes.TrimSpace(append(out, stderr.Bytes()...)))
	}
	return out, nil
}

// update fetches the package lists. A suite whose list cannot be fetched (a mirror
// in the middle of a sync serves a Packages file of another size than its Release
// names) is left out with a warning on warn: apt keeps the other suites' lists, and
// the release's own suite is checked by what is resolved or downloaded next.
func (r *aptRepo) update(ctx context.Context, warn io.Writer) error {
	_, err := r.run(ctx, r.dir, "apt-get", "update", "-q")
	var ee *exec.ExitError
	if err != nil && errors.As(err, &ee) {
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.HasPrefix(line, "E: Failed to fetch") {
				fmt.Fprintf(warn, "warning: %s (%s): %s\n", r.p.DebArch, r.p.Release, strings.TrimPrefix(line, "E: "))
			}
		}
		return nil
	}
	return err
}

// depends lists pkgs and everything they depend on (Depends and Pre-Depends,
// recursively; no Recommends), sorted.
func (r *aptRepo) depends(ctx context.Context, pkgs []string) ([]string, error) {
	out, err := r.run(ctx, r.dir, "apt-cache", append([]string{"depends", "--recurse", "--no-recommends",
		"--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	return parseDepends(out), nil
}

// download runs `apt-get download` for specs (pkg or pkg=version) into dir.
func (r *aptRepo) download(ctx context.Context, dir string, specs []string) error {
	_, err := r.run(ctx, dir, "apt-get", append([]string{"download", "-q"}, specs...)...)
	return err
}
