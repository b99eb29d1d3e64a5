package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/testenv"
)

func TestLockFormat(t *testing.T) {
	entries := []lockEntry{
		{Arch: "riscv64", Package: "libc6", Version: "2.41-12", FileArch: "riscv64", SHA256: strings.Repeat("a", 64)},
		{Arch: "amd64", Package: "libgmp10", Version: "2:6.2.1+dfsg1-1.1", FileArch: "amd64", SHA256: strings.Repeat("b", 64)},
		{Arch: "amd64", Package: "iptables", Version: "1.8.9-2", FileArch: "amd64", SHA256: strings.Repeat("c", 64)},
	}
	path := filepath.Join(t.TempDir(), "debs.lock")
	if err := os.WriteFile(path, formatLock(entries), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readLock(path)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by platform (amd64 first, riscv64 last), then package.
	var names []string
	for _, e := range got {
		names = append(names, e.Arch+"/"+e.Package)
	}
	if want := "amd64/iptables amd64/libgmp10 riscv64/libc6"; strings.Join(names, " ") != want {
		t.Errorf("lock order %q, want %q", names, want)
	}
	if got[1].fileName() != "libgmp10_2%3a6.2.1+dfsg1-1.1_amd64.deb" {
		t.Errorf("file name %q: want apt-get download's, the epoch's colon as %%3a", got[1].fileName())
	}
	for _, bad := range []string{"amd64 iptables 1.8.9-2 amd64\n", "amd64 iptables 1.8.9-2 amd64 " + strings.Repeat("z", 64) + "\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readLock(path); err == nil {
			t.Errorf("readLock accepted %q", bad)
		}
	}
	// The committed lock names every package of every platform.
	lock, err := readLock("debs.lock")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range platforms {
		have := map[string]bool{}
		for _, e := range lock {
			if e.Arch == p.DebArch {
				have[e.Package] = true
			}
		}
		for _, want := range strings.Split(defaultPackages, ",") {
			if !have[want] {
				t.Errorf("debs.lock has no %s for %s", want, p)
			}
		}
	}
}

// TestFetchLocked: a cached .deb whose sha256 is not the lock's, and a version the
// mirror does not have, are errors naming the package (the second asks apt, with a
// private cache).
func TestFetchLocked(t *testing.T) {
	cache := t.TempDir()
	amd64, _ := findPlatform("amd64")
	e := lockEntry{Arch: "amd64", Package: "iptables", Version: "0.0.1-weft", FileArch: "amd64", SHA256: strings.Repeat("0", 64)}
	if err := os.MkdirAll(filepath.Join(cache, "debs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "debs", e.fileName()), []byte("not this"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := fetchLocked(context.Background(), cache, amd64, []lockEntry{e}, io.Discard)
	if !errors.Is(err, errLocked) || !strings.Contains(err.Error(), "iptables 0.0.1-weft (amd64)") {
		t.Errorf("a cached .deb with another sha256: %v, want errLocked naming iptables 0.0.1-weft (amd64)", err)
	}
	if _, err := fetchLocked(context.Background(), cache, amd64, nil, io.Discard); err == nil {
		t.Errorf("a lock without amd64 packages: no error")
	}
	if testing.Short() {
		return
	}
	testenv.NeedTools(t, "apt-get", "apt-cache")
	if err := os.Remove(filepath.Join(cache, "debs", e.fileName())); err != nil {
		t.Fatal(err)
	}
	_, err = fetchLocked(context.Background(), cache, amd64, []lockEntry{e}, io.Discard)
	if !errors.Is(err, errLocked) || !strings.Contains(err.Error(), "iptables 0.0.1-weft (amd64)") {
		t.Errorf("a version Debian does not have: %v, want errLocked naming iptables 0.0.1-weft (amd64)", err)
	}
	t.Logf("%v", err)
}
