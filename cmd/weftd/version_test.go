package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestMakeBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.99.1", Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"},
	}}
	clean := &debug.BuildInfo{GoVersion: "go1.99.2", Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "fedcba9876543210fedcba9876543210fedcba98"},
		{Key: "vcs.modified", Value: "false"},
	}}
	unstamped := &debug.BuildInfo{GoVersion: "go1.99.3", Main: debug.Module{Version: "v1.2.3"}}
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            string
	}{
		{"stamped by the toolchain", "1.0.0", "", stamped,
			"weftd 1.0.0 commit 0123456789abcdef0123456789abcdef01234567 (modified) go1.99.1"},
		{"toolchain wins over -ldflags", "1.0.0", "aaaa", clean,
			"weftd 1.0.0 commit fedcba9876543210fedcba9876543210fedcba98 go1.99.2"},
		{"-ldflags commit in a worktree", "2.0.0", "abcdef-modified", unstamped,
			"weftd 2.0.0 commit abcdef (modified) go1.99.3"},
		{"clean -ldflags commit", "2.0.0", "abcdef", unstamped, "weftd 2.0.0 commit abcdef go1.99.3"},
		{"module version when main.version is empty", "", "", unstamped, "weftd v1.2.3 commit unknown go1.99.3"},
		{"no build info", "3.0.0", "", nil, "weftd 3.0.0 commit unknown " + runtime.Version()},
		{"git missing at build time", "3.0.0", "-modified", nil, "weftd 3.0.0 commit unknown " + runtime.Version()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := makeBuildInfo(tt.version, tt.commit, tt.bi).String(); got != tt.want {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestVersionFlag runs weftd's entry point with --version: it prints one line with the
// version, the commit and the Go version of this test binary, and exits 0 without
// starting anything.
func TestVersionFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"--version"}, func(string) string { return "" }, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	line := strings.TrimSuffix(out.String(), "\n")
	if strings.Contains(line, "\n") {
		t.Fatalf("--version printed more than one line: %q", out.String())
	}
	want := readBuildInfo().String()
	if line != want {
		t.Fatalf("--version printed %q, want %q", line, want)
	}
	for _, part := range []string{"weftd " + version + " ", " commit ", runtime.Version()} {
		if !strings.Contains(line, part) {
			t.Errorf("--version %q lacks %q", line, part)
		}
	}
	if errOut.Len() != 0 {
		t.Errorf("--version wrote to stderr: %q", errOut.String())
	}
}

// TestVersionLdflags builds weftd the way the Makefile does, with the version and the
// commit given by -ldflags, and runs the binary's --version.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds weftd")
	}
	bin := filepath.Join(t.TempDir(), "weftd")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags=-X main.version=7.7.7-test -X main.commit=c0ffee-modified", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("weftd --version: %v", err)
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatalf("go env GOVERSION: %v", err)
	}
	want := "weftd 7.7.7-test commit c0ffee (modified) " + strings.TrimSpace(string(goVersion)) + "\n"
	if string(out) != want {
		t.Fatalf("--version printed %q, want %q", out, want)
	}
}
