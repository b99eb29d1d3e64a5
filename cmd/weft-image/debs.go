package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// errNoDeb is wrapped when a package's .deb is neither cached nor downloadable.
var errNoDeb = errors.New("no .deb")

// resolveDebs lists pkgs and everything they depend on (Depends and Pre-Depends,
// recursively; no Recommends), as apt sees it on this machine, sorted.
func resolveDebs(ctx context.Context, pkgs []string) ([]string, error) {
	args := append([]string{"depends", "--recurse", "--no-recommends", "--no-suggests",
		"--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"}, pkgs...)
	out, err := exec.CommandContext(ctx, "apt-cache", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache depends %s: %w%s", strings.Join(pkgs, " "), err, stderrOf(err))
	}
	return parseDepends(out), nil
}

// parseDepends takes the package names from `apt-cache depends --recurse` output: the
// unindented lines, less virtual packages ("<name>").
func parseDepends(out []byte) []string {
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == ' ' || line[0] == '<' {
			continue
		}
		seen[strings.TrimSpace(line)] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fetchDebs returns the .deb file of every package in pkgs from dir, downloading with
// `apt-get download` those that are not there yet. A cached .deb is used as it is, so
// the image stays the same until the cache is emptied.
func fetchDebs(ctx context.Context, dir string, pkgs []string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	updated := false
	for _, p := range pkgs {
		f, err := cachedDeb(dir, p)
		if errors.Is(err, errNoDeb) {
			if err := aptDownload(ctx, dir, p, &updated); err != nil {
				return nil, err
			}
			f, err = cachedDeb(dir, p)
		}
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// aptDownload runs `apt-get download pkg` in dir; when that fails it refreshes apt's
// package lists once (a fresh machine has none) and tries again.
func aptDownload(ctx context.Context, dir, pkg string, updated *bool) error {
	for {
		cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", pkg)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		if *updated {
			return fmt.Errorf("apt-get download %s: %w: %s", pkg, err, bytes.TrimSpace(out))
		}
		*updated = true
		if out, err := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get update: %w: %s", err, bytes.TrimSpace(out))
		}
	}
}

// cachedDeb finds <pkg>_<version>_<arch>.deb in dir; more than one version is an error,
// as the image would then depend on which one is picked.
func cachedDeb(dir, pkg string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if err != nil {
		return "", err
	}
	switch len(m) {
	case 0:
		return "", fmt.Errorf("%w for %s in %s", errNoDeb, pkg, dir)
	case 1:
		return m[0], nil
	}
	return "", fmt.Errorf("%s: %d versions of %s cached (%s): remove the old ones", dir, len(m), pkg, strings.Join(m, ", "))
}

// debData returns the data.tar of a .deb: the files it installs.
func debData(ctx context.Context, file string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", file).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w%s", file, err, stderrOf(err))
	}
	return out, nil
}

// skipDebPath leaves out what a container never reads: documentation (but the
// copyright files, which the licenses ask to ship), manual pages, translations,
// and glibc's iconv modules.
func skipDebPath(name string) bool {
	if rest, ok := strings.CutPrefix(name, "usr/share/doc/"); ok {
		return !strings.HasSuffix(rest, "/copyright")
	}
	for _, p := range []string{"usr/share/man", "usr/share/info", "usr/share/locale",
		"usr/share/lintian", "usr/lib/x86_64-linux-gnu/gconv", "usr/lib/aarch64-linux-gnu/gconv"} {
		if name == p || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	return false
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + string(bytes.TrimSpace(ee.Stderr))
	}
	return ""
}
