package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// errLocked is wrapped when a .deb the lock names cannot be had as locked.
var errLocked = errors.New("locked .deb unavailable")

// lockEntry is one Debian package of one of the image's platforms: the exact version
// and the sha256 of its .deb.
type lockEntry struct {
	Arch     string // Debian architecture of the platform: amd64, armhf, ...
	Package  string
	Version  string
	FileArch string // the .deb's own Architecture: Arch, or all
	SHA256   string
}

// fileName is the .deb's name as apt-get download writes it: the epoch's colon is %3a.
func (e lockEntry) fileName() string {
	return e.Package + "_" + strings.ReplaceAll(e.Version, ":", "%3a") + "_" + e.FileArch + ".deb"
}

func (e lockEntry) String() string {
	return fmt.Sprintf("%s %s (%s)", e.Package, e.Version, e.Arch)
}

const lockHeader = `# The Debian packages in weft's image, per architecture: exactly these versions, with
# these sha256 sums, are what make image puts in (cmd/weft-image). Refresh it, to take
# a Debian point release or security update, with: make image-lock
# columns: architecture package version deb-architecture sha256
`

// readLock parses a lock file.
func readLock(path string) ([]lockEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var entries []lockEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 5 || len(f[4]) != 64 {
			return nil, fmt.Errorf("%s:%d: want architecture package version deb-architecture sha256, got %q", path, n, line)
		}
		if _, err := hex.DecodeString(f[4]); err != nil {
			return nil, fmt.Errorf("%s:%d: sha256 %q: %w", path, n, f[4], err)
		}
		entries = append(entries, lockEntry{Arch: f[0], Package: f[1], Version: f[2], FileArch: f[3], SHA256: f[4]})
	}
	return entries, nil
}

// formatLock writes entries sorted by architecture (in platforms' order) and package.
func formatLock(entries []lockEntry) []byte {
	order := map[string]int{}
	for i, p := range platforms {
		order[p.DebArch] = i
	}
	sort.Slice(entries, func(i, j int) bool {
		if a, b := order[entries[i].Arch], order[entries[j].Arch]; a != b {
			return a < b
		}
		return entries[i].Package < entries[j].Package
	})
	var b bytes.Buffer
	b.WriteString(lockHeader)
	for _, e := range entries {
		fmt.Fprintf(&b, "%s %s %s %s %s\n", e.Arch, e.Package, e.Version, e.FileArch, e.SHA256)
	}
	return b.Bytes()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fetchLocked returns the .deb files of the lock's entries for p from cache/debs,
// downloading those not there (exactly the locked version) through p's private apt and
// checking every file's sha256.
func fetchLocked(ctx context.Context, cache string, p platform, entries []lockEntry, warn io.Writer) ([]string, error) {
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, err
	}
	var files []string
	var missing []lockEntry
	for _, e := range entries {
		if e.Arch != p.DebArch {
			continue
		}
		f := filepath.Join(debs, e.fileName())
		files = append(files, f)
		sum, err := fileSHA256(f)
		if errors.Is(err, os.ErrNotExist) {
			missing = append(missing, e)
			continue
		}
		if err != nil {
			return nil, err
		}
		if sum != e.SHA256 {
			return nil, fmt.Errorf("%w: %s: cached %s has sha256 %s, the lock says %s (remove the file to fetch it again)",
				errLocked, e, f, sum, e.SHA256)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("the lock names no packages for %s (%s): run make image-lock", p.DebArch, p)
	}
	if len(missing) == 0 {
		return files, nil
	}
	repo, err := newAptRepo(cache, p)
	if err != nil {
		return nil, err
	}
	if err := downloadLocked(ctx, repo, debs, missing, warn); err != nil {
		return nil, err
	}
	return files, nil
}

// downloadLocked downloads entries into debs, refreshing the package lists first when
// apt does not have them (a fresh cache) and, when a version cannot be had, naming
// each package that failed.
func downloadLocked(ctx context.Context, repo *aptRepo, debs string, entries []lockEntry, warn io.Writer) error {
	tmp, err := os.MkdirTemp(debs, ".download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var specs []string
	for _, e := range entries {
		specs = append(specs, e.Package+"="+e.Version)
	}
	if err := repo.download(ctx, tmp, specs); err != nil {
		if err := repo.update(ctx, warn); err != nil {
			return err
		}
		if err := repo.download(ctx, tmp, specs); err != nil {
			// Name each package that cannot be had.
			var failed []string
			for _, e := range entries {
				if err := repo.download(ctx, tmp, []string{e.Package + "=" + e.Version}); err != nil {
					failed = append(failed, e.String())
				}
			}
			return fmt.Errorf("%w: %s from Debian %s: the mirror no longer has the locked version (make image-lock moves the lock to what it has): %v",
				errLocked, strings.Join(failed, ", "), repo.p.Release, err)
		}
	}
	for _, e := range entries {
		src := filepath.Join(tmp, e.fileName())
		sum, err := fileSHA256(src)
		if err != nil {
			return fmt.Errorf("%w: %s: apt-get download wrote no %s: %v", errLocked, e, e.fileName(), err)
		}
		if sum != e.SHA256 {
			return fmt.Errorf("%w: %s: downloaded .deb has sha256 %s, the lock says %s", errLocked, e, sum, e.SHA256)
		}
		if err := os.Rename(src, filepath.Join(debs, e.fileName())); err != nil {
			return err
		}
	}
	return nil
}

// lockPlatform resolves pkgs and their dependencies for p as its Debian release has
// them now, downloads them into cache/debs and returns their lock entries.
func lockPlatform(ctx context.Context, cache string, p platform, pkgs []string, warn io.Writer) ([]lockEntry, error) {
	repo, err := newAptRepo(cache, p)
	if err != nil {
		return nil, err
	}
	if err := repo.update(ctx, warn); err != nil {
		return nil, err
	}
	names, err := repo.depends(ctx, pkgs)
	if err != nil {
		return nil, err
	}
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(debs, ".lock-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := repo.download(ctx, tmp, names); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if err != nil {
		return nil, err
	}
	if len(files) != len(names) {
		return nil, fmt.Errorf("%s: apt-get download wrote %d .debs for %d packages (%s)", p.DebArch, len(files), len(names), strings.Join(names, " "))
	}
	var entries []lockEntry
	for _, f := range files {
		out, err := exec.CommandContext(ctx, "dpkg-deb", "--show", "--showformat=${Package} ${Version} ${Architecture}", f).Output()
		if err != nil {
			return nil, fmt.Errorf("dpkg-deb --show %s: %w%s", f, err, stderrOf(err))
		}
		fields := strings.Fields(string(out))
		if len(fields) != 3 {
			return nil, fmt.Errorf("dpkg-deb --show %s: %q", f, out)
		}
		sum, err := fileSHA256(f)
		if err != nil {
			return nil, err
		}
		e := lockEntry{Arch: p.DebArch, Package: fields[0], Version: fields[1], FileArch: fields[2], SHA256: sum}
		if err := os.Rename(f, filepath.Join(debs, e.fileName())); err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, nil
}
