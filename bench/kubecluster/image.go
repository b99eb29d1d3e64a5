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
	"sort"
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
	layer, err := fileLayer(map[string]string{"/entrypoint": binary})
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
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = []string{"/entrypoint"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	return writeTagged(path, ref, img)
}

// WriteImageOver writes an image archive named ref: the image of the archive base (one
// image) with one more layer holding files (path in the image -> file here, mode 0755).
func WriteImageOver(path, base, ref string, files map[string]string) error {
	img, err := tarball.ImageFromPath(base, nil)
	if err != nil {
		return fmt.Errorf("image %s: %w", base, err)
	}
	layer, err := fileLayer(files)
	if err != nil {
		return err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return err
	}
	return writeTagged(path, ref, img)
}

// fileLayer is a layer holding files (path in the image -> file here), each mode 0755
// and dated at the epoch, so the same files give the same layer.
func fileLayer(files map[string]string) (v1.Layer, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		data, err := os.ReadFile(files[n])
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(n, "/"), Mode: 0o755, Size: int64(len(data)),
			ModTime: time.Unix(0, 0).UTC(), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.DockerLayer))
}

// writeTagged writes img as an archive named ref.
func writeTagged(path, ref string, img v1.Image) error {
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
