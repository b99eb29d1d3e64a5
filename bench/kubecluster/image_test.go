package kubecluster

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestWriteImage checks what ctr import needs (a platform, an entrypoint, the tag) and
// that an image layered over it keeps its content and adds the new files.
func TestWriteImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("not really a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "base.tar")
	if err := WriteImage(base, "registry.weft.test/base:1", bin); err != nil {
		t.Fatal(err)
	}
	tag := name.MustParseReference("registry.weft.test/base:1").(name.Tag)
	img, err := tarball.ImageFromPath(base, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/entrypoint" {
		t.Errorf("config %s/%s entrypoint %v, want linux/amd64 [/entrypoint]", cfg.OS, cfg.Architecture, cfg.Config.Entrypoint)
	}
	if got := files(t, img); string(got["entrypoint"]) != "not really a program" {
		t.Errorf("files %v", got)
	}

	over := filepath.Join(dir, "over.tar")
	if err := WriteImageOver(over, base, "registry.weft.test/over:2", map[string]string{"/opt/bin/x": bin}); err != nil {
		t.Fatal(err)
	}
	img2, err := tarball.ImageFromPath(over, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := files(t, img2)
	if string(got["entrypoint"]) != "not really a program" || string(got["opt/bin/x"]) != "not really a program" {
		t.Errorf("layered image files %v, want entrypoint and opt/bin/x", got)
	}
	if err := WriteImageOver(over, filepath.Join(dir, "missing.tar"), "registry.weft.test/over:2", nil); err == nil {
		t.Error("a missing base image gave no error")
	}
}

// files reads the image's flattened file system.
func files(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}
