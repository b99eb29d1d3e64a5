package kubecluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteImage writes an image archive (docker save layout, which ctr imports) named
// ref, holding one static binary as /entrypoint, its entrypoint. The config names
// linux/amd64: ctr import skips images without a platform.
func WriteImage(path, ref, binary string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	if err := tw.WriteHeader(&tar.Header{Name: "entrypoint", Mode: 0o755, Size: int64(len(bin)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.DockerLayer))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{"/entrypoint"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	return tarball.WriteToFile(path, tag, img)
}

// WriteImageOver writes an image archive named ref: the image of the archive base (one
// image) with one more layer holding files (path in the image -> file here, mode 0755).
func WriteImageOver(path, base, ref string, files map[string]string) error {
	img, err := tarball.ImageFromPath(base, nil)
	if err != nil {
		return fmt.Errorf("image %s: %w", base, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	for name, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(name, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.DockerLayer))
	if err != nil {
		return err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	return tarball.WriteToFile(path, tag, img)
}

// BuildFlanneld builds the upstream flanneld of test/flannel as a static binary (its
// udp backend is C: cgo, linked statically) for an image.
func BuildFlanneld(ctx context.Context, repoRoot, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "netgo,osusergo",
		"-ldflags=-s -w -linkmode external -extldflags -static", "-o", out, "github.com/flannel-io/flannel")
	cmd.Dir = filepath.Join(repoRoot, "test", "flannel")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build static flanneld: %w: %s", err, b)
	}
	return nil
}
