package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("plugin v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		dst  string
		perm os.FileMode
	}{
		{"keeps mode", []string{src, filepath.Join(dir, "flannel")}, "flannel", 0o755},
		{"explicit mode", []string{"-mode", "0644", src, filepath.Join(dir, "10-flannel.conflist")}, "10-flannel.conflist", 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(dir, tt.dst)
			// An older file is replaced, not appended to or merged with.
			if err := os.WriteFile(dst, []byte("an older and longer plugin v1"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := run(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "plugin v2" {
				t.Errorf("content %q, want %q", got, "plugin v2")
			}
			st, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tt.perm {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), tt.perm)
			}
		})
	}
	left, err := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if err != nil || len(left) != 0 {
		t.Errorf("temporary files left behind: %v (%v)", left, err)
	}
}

func TestInstallErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{filepath.Join(dir, "missing"), filepath.Join(dir, "dst")},
		{dir, filepath.Join(dir, "dst")},
		{"only-one"},
		{"-mode", "9z", dir, filepath.Join(dir, "dst")},
	} {
		if err := run(args); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "dst")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed install left dst behind: %v", err)
	}
}
