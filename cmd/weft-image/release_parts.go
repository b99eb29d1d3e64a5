package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/action"
)

// releaseBinary copies bins/<GOARCH>/name to dst, after checking it was built as a
// release is (linux, the platform's architecture, static, -trimpath, and on the
// build machine's architecture, weftd says the version), and writes dst.cdx.json,
// its SBOM: the Go modules the binary embeds, read by the SBOM tool.
func releaseBinary(ctx context.Context, o releaseOpts, p platform, name, dst string) error {
	src := filepath.Join(o.image.bins, p.GOARCH, name)
	if err := checkBuild(src, p); err != nil {
		return err
	}
	if name == "weftd" && p.GOARCH == runtime.GOARCH {
		out, err := exec.CommandContext(ctx, src, "--version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s --version: %w: %s", src, err, out)
		}
		if !strings.Contains(string(out), " "+o.version+" ") {
			return fmt.Errorf("%s --version says %q: not built for %s (make release builds it with -X main.version)", src, strings.TrimSpace(string(out)), o.version)
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		return err
	}
	args := append(append([]string{}, o.sbom[1:]...), "bin", "-json", "-std", "-noserial", "-notimestamp",
		"-version", "v"+o.version, "-output", dst+".cdx.json", dst)
	out, err := exec.CommandContext(ctx, o.sbom[0], args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("SBOM of %s: %s: %w: %s", dst, strings.Join(o.sbom, " "), err, out)
	}
	return nil
}

// checkBuild checks the build settings a Go binary records against a release's.
func checkBuild(path string, p platform) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	got := map[string]string{}
	for _, s := range bi.Settings {
		got[s.Key] = s.Value
	}
	want := map[string]string{"GOOS": "linux", "GOARCH": p.GOARCH, "CGO_ENABLED": "0", "-trimpath": "true"}
	if p.Variant != "" {
		want["GOARM"] = strings.TrimPrefix(p.Variant, "v")
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s: built with %s=%q, a release wants %q", path, k, got[k], v)
		}
	}
	return nil
}

// packageChart packages the chart in src into dir as `helm package --version
// version --app-version version` does, its values naming the image ref@digest, and
// returns the package's path.
func packageChart(src, dir, version, ref string, digest v1.Hash) (string, error) {
	work, err := os.MkdirTemp("", "weft-chart")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	chart := filepath.Join(work, filepath.Base(src))
	if err := os.CopyFS(chart, os.DirFS(src)); err != nil {
		return "", fmt.Errorf("copy the chart: %w", err)
	}
	if err := pinCopy(filepath.Join(src, "values.yaml"), filepath.Join(chart, "values.yaml"), ref, digest); err != nil {
		return "", err
	}
	p := action.NewPackage()
	p.Version, p.AppVersion, p.Destination = version, version, dir
	pkg, err := p.Run(chart, nil)
	if err != nil {
		return "", fmt.Errorf("helm package %s: %w", src, err)
	}
	return pkg, nil
}

// writeSums writes dir/SHA256SUMS over every file in dir, as sha256sum does.
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var sums bytes.Buffer
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "SHA256SUMS" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
		fmt.Fprintf(&sums, "%x  %s\n", h.Sum(nil), e.Name())
	}
	_, err = writeFile(filepath.Join(dir, "SHA256SUMS"), func(w io.Writer) error {
		_, err := sums.WriteTo(w)
		return err
	})
	return err
}
