package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// A release (make release VERSION=x.y.z) is one folder: per platform, weftd, weft-install
// and weft-cni with an SBOM each; the image archive tagged with the version; the chart
// packaged with that version and naming that image; weft.yml, weft-cleanup.yml, weft-uninstall.yml
// pinned to it; the systemd unit weftd.service and its drop-in for flanneld's
// sysconfig file (flanneld-sysconfig.conf, for /etc/systemd/system/weftd.service.d/);
// and SHA256SUMS over all of them.

var (
	// errVersion is wrapped when the version is missing or not semantic.
	errVersion = errors.New("not a semantic version x.y.z")
	// errChangelog is wrapped when CHANGELOG.md has no section for the version.
	errChangelog = errors.New("no section for the version")
)

// semver is a semantic version as semver.org gives it, without a leading v.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// releaseBins are the programs of a release, as make builds them into bins/<GOARCH>/.
var releaseBins = []string{"weftd", "weft-install", "weft-cni"}

// releaseOpts is what a release is made from and where it goes.
type releaseOpts struct {
	version, changelog, out, repo, chart string
	manifests                            []string
	files                                []string // shipped as they are (the systemd unit and drop-in)
	sbom                                 []string // the SBOM tool's command line, without its arguments
	image                                imageOpts
}

// checkRelease refuses a version that is not semantic or that changelog has no
// "## [version]" section for.
func checkRelease(version, changelog string) error {
	if !semver.MatchString(version) {
		return fmt.Errorf("version %q: %w (make release VERSION=x.y.z)", version, errVersion)
	}
	data, err := os.ReadFile(changelog)
	if err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	section := regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(version) + `\]`)
	if !section.Match(data) {
		return fmt.Errorf("%s: %w %s: add a \"## [%s]\" section first", changelog, errChangelog, version, version)
	}
	return nil
}

func runRelease(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("weft-image release", flag.ContinueOnError)
	var o releaseOpts
	var archs, manifests, sbom string
	check := fs.Bool("check", false, "only check the version and the changelog")
	fs.StringVar(&o.version, "version", "", "the version, x.y.z (required)")
	fs.StringVar(&o.changelog, "changelog", "CHANGELOG.md", "changelog that must have a section for the version")
	fs.StringVar(&o.out, "o", "", "the release's folder, replaced as a whole (required)")
	fs.StringVar(&o.image.bins, "bins", "", "directory with <GOARCH>/{weftd,weft-install,weft-cni} built for the version (required)")
	fs.StringVar(&o.repo, "repo", imageRepo, "the image's repository; its tag is the version")
	fs.StringVar(&o.chart, "chart", "deploy/chart/weft", "the Helm chart to package")
	fs.StringVar(&manifests, "manifests", "deploy/weft.yml,deploy/weft-cleanup.yml,deploy/weft-uninstall.yml", "manifests to pin to the release's image and ship")
	var files string
	fs.StringVar(&files, "files", "deploy/weftd.service,deploy/weftd.service.d/flanneld-sysconfig.conf", "files to ship as they are, by their base names")
	fs.StringVar(&sbom, "sbom", "", "command that writes a binary's SBOM: it is given bin -json … -output FILE BINARY (required)")
	addImageFlags(fs, &o.image, &archs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkRelease(o.version, o.changelog); err != nil || *check {
		return err
	}
	if o.out == "" || o.image.bins == "" || sbom == "" {
		return errors.New("-o, -bins and -sbom are required")
	}
	var err error
	if o.image.platforms, err = selectPlatforms(archs); err != nil {
		return err
	}
	o.manifests = strings.Split(manifests, ",")
	o.files = splitNonEmpty(files)
	o.sbom = strings.Fields(sbom)
	// Stopped (make's ^C), the release stops its commands and removes what it wrote.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return release(ctx, o, stdout)
}

// release writes the release into a fresh folder beside o.out and renames it to
// o.out once every part is there: a failed release leaves nothing behind.
func release(ctx context.Context, o releaseOpts, stdout io.Writer) error {
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(o.out), "."+filepath.Base(o.out)+".tmp*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for _, p := range o.image.platforms {
		for _, name := range releaseBins {
			bin := name + "-" + strings.ReplaceAll(p.String(), "/", "-")
			if err := releaseBinary(ctx, o, p, name, filepath.Join(tmp, bin)); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s, %s.cdx.json\n", bin, bin)
		}
	}
	img := o.image
	img.ref = o.repo + ":" + o.version
	img.out = filepath.Join(tmp, "weftd-image-"+o.version+".tar")
	digest, err := buildImage(ctx, img, stdout)
	if err != nil {
		return err
	}
	for _, m := range o.manifests {
		if err := pinCopy(m, filepath.Join(tmp, filepath.Base(m)), img.ref, digest); err != nil {
			return err
		}
	}
	for _, f := range o.files {
		if err := copyFile(f, filepath.Join(tmp, filepath.Base(f))); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", filepath.Base(f))
	}
	pkg, err := packageChart(o.chart, tmp, o.version, img.ref, digest)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", filepath.Base(pkg))
	if err := writeSums(tmp); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("release %s: %w", o.version, err)
	}
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	if err := os.Rename(tmp, o.out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "release %s in %s (%s)\n", o.version, o.out, time.Since(start).Round(time.Second))
	return nil
}

// pinCopy writes the manifest src to dst, naming ref@digest.
func pinCopy(src, dst, ref string, digest v1.Hash) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	out := pin(data, ref, digest)
	if err := checkPinned(out, ref, digest); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	_, err = writeFile(dst, func(w io.Writer) error { _, err := io.Copy(w, bytes.NewReader(out)); return err })
	return err
}

// copyFile writes src's bytes to dst.
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	_, err = writeFile(dst, func(w io.Writer) error { _, err := w.Write(data); return err })
	return err
}

// splitNonEmpty splits a comma-separated list, dropping empty items.
func splitNonEmpty(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
