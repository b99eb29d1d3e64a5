package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/weftnet/weft/bench/testenv"
)

func TestCheckRelease(t *testing.T) {
	changelog := filepath.Join(t.TempDir(), "CHANGELOG.md")
	err := os.WriteFile(changelog, []byte("# Changelog\n\n## [Unreleased]\n\n## [1.2.3-rc.1] - 2026-01-02\n\n- x\n\n"+
		"## [0.1.0] - 2025-12-01\n\n- y\n\nNot a section: ## [9.9.9]\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		version string
		want    error
	}{
		{"0.1.0", nil},
		{"1.2.3-rc.1", nil},
		{"1.2.3", errChangelog},
		{"9.9.9", errChangelog},
		{"", errVersion},
		{"v0.1.0", errVersion},
		{"0.1", errVersion},
		{"01.1.0", errVersion},
		{"0.1.0-", errVersion},
		{"Unreleased", errVersion},
	} {
		t.Run(tt.version, func(t *testing.T) {
			if err := checkRelease(tt.version, changelog); !errors.Is(err, tt.want) {
				t.Errorf("checkRelease(%q) = %v, want %v", tt.version, err, tt.want)
			}
		})
	}
}

// releaseVersion is a version no real release has; TestRelease's changelog names it.
const releaseVersion = "0.0.1-test.1"

// makeRelease runs make release in the module's root with args, as a person would
// (no make of an outer make test in its environment), and returns its output.
func makeRelease(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-C", filepath.Join("..", ".."), "release"}, args...)...)
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, e)
		}
	}
	return cmd.CombinedOutput()
}

// TestRelease runs make release for a throwaway version into a temporary folder, for
// two of the six architectures (amd64 and arm/v7; all six are the same loop, and each
// adds a minute to make test), after its refusals, and checks every file it wrote.
func TestRelease(t *testing.T) {
	testenv.SkipShort(t, "builds binaries, an image and SBOMs")
	testenv.NeedTools(t, "make", "sha256sum", "apt-get")
	dir := t.TempDir()
	changelog := filepath.Join(dir, "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte("# Changelog\n\n## ["+releaseVersion+"] - 2026-01-01\n\n- A test.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "release")
	common := []string{"RELEASE_DIR=" + out, "RELEASE_ARCHS=amd64 arm"}
	for _, tt := range []struct {
		name, say string
		args      []string
	}{
		{"no version", "name the version", []string{"CHANGELOG=" + changelog}},
		{"not semantic", "not a semantic version", []string{"VERSION=1.2", "CHANGELOG=" + changelog}},
		{"not in the changelog", "no section for the version", []string{"VERSION=0.0.2", "CHANGELOG=" + changelog}},
		{"no changelog", "changelog", []string{"VERSION=" + releaseVersion, "CHANGELOG=" + filepath.Join(dir, "none.md")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := makeRelease(t, append(tt.args, common...)...)
			if err == nil || !strings.Contains(string(got), tt.say) {
				t.Errorf("make release: %v, want a failure saying %q:\n%s", err, tt.say, got)
			}
			checkOnly(t, dir, "CHANGELOG.md")
		})
	}
	got, err := makeRelease(t, append(common, "VERSION="+releaseVersion, "CHANGELOG="+changelog)...)
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, got)
	}
	t.Logf("make release:\n%s", got)
	checkOnly(t, dir, "CHANGELOG.md", "release")
	var bins []string
	for _, a := range []string{"amd64", "arm-v7"} {
		for _, b := range releaseBins {
			bins = append(bins, b+"-linux-"+a)
		}
	}
	want := []string{"SHA256SUMS", "weft-" + releaseVersion + ".tgz", "weft-cleanup.yml", "weft-uninstall.yml", "weft.yml", "weftd-image-" + releaseVersion + ".tar",
		"weftd.service", "flanneld-sysconfig.conf"}
	for _, b := range bins {
		want = append(want, b, b+".cdx.json")
	}
	checkOnly(t, out, want...)
	checkSums(t, out, len(want)-1)
	checkReleaseImage(t, out)
	// The systemd unit and its drop-in, as they are in deploy/.
	for shipped, src := range map[string]string{"weftd.service": "weftd.service", "flanneld-sysconfig.conf": "weftd.service.d/flanneld-sysconfig.conf"} {
		got, err1 := os.ReadFile(filepath.Join(out, shipped))
		want, err2 := os.ReadFile(filepath.Join("..", "..", "deploy", src))
		if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the release is not deploy/%s (%v, %v)", shipped, src, err1, err2)
		}
	}
	for _, b := range bins {
		checkSBOM(t, filepath.Join(out, b+".cdx.json"), strings.HasPrefix(b, "weftd-"))
	}
	v, err := exec.Command(filepath.Join(out, "weftd-linux-amd64"), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "weftd "+releaseVersion+" ") {
		t.Errorf("weftd-linux-amd64 --version: %v: %s, want weftd %s", err, v, releaseVersion)
	}
}

// checkOnly fails t unless dir holds exactly the entries names.
func checkOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// checkSums checks SHA256SUMS with sha256sum -c and that it names n files.
func checkSums(t *testing.T, dir string, n int) {
	t.Helper()
	cmd := exec.Command("sha256sum", "--strict", "-c", "SHA256SUMS")
	cmd.Dir = dir
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, got)
	}
	if lines := strings.Count(string(got), ": OK\n"); lines != n {
		t.Errorf("sha256sum -c: %d files OK, want %d:\n%s", lines, n, got)
	}
}

// checkReleaseImage checks that the image archive is tagged with the version and that
// the manifests and the chart name it by that tag and its digest.
func checkReleaseImage(t *testing.T, dir string) {
	t.Helper()
	ref, digest, err := archiveIndex(filepath.Join(dir, "weftd-image-"+releaseVersion+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	if want := imageRepo + ":" + releaseVersion; ref != want {
		t.Errorf("the image archive is tagged %s, want %s", ref, want)
	}
	for _, m := range []string{"weft.yml", "weft-cleanup.yml", "weft-uninstall.yml"} {
		data, err := os.ReadFile(filepath.Join(dir, m))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPinned(data, ref, digest); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	ch, err := loader.Load(filepath.Join(dir, "weft-"+releaseVersion+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != releaseVersion || ch.Metadata.AppVersion != releaseVersion {
		t.Errorf("Chart.yaml: version %q, appVersion %q, want %s", ch.Metadata.Version, ch.Metadata.AppVersion, releaseVersion)
	}
	img, _ := ch.Values["flannel"].(map[string]any)["image"].(map[string]any)
	if img["repository"] != imageRepo || img["tag"] != releaseVersion || img["digest"] != digest.String() {
		t.Errorf("chart values flannel.image = %v, want %s:%s@%s", img, imageRepo, releaseVersion, digest)
	}
}

// checkSBOM checks that path is a CycloneDX SBOM of weft's module at the version,
// naming the standard library and, for weftd, the etcd and Kubernetes clients.
func checkSBOM(t *testing.T, path string, weftd bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type component struct{ Name, Version string }
	var bom struct {
		BOMFormat  string `json:"bomFormat"`
		Metadata   struct{ Component component }
		Components []component
	}
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component != (component{"github.com/weftnet/weft", "v" + releaseVersion}) {
		t.Errorf("%s: %s of %+v, want CycloneDX of github.com/weftnet/weft v%s", path, bom.BOMFormat, bom.Metadata.Component, releaseVersion)
	}
	want := []string{"std"}
	if weftd {
		want = append(want, "go.etcd.io/etcd/client/v3", "k8s.io/client-go", "go.uber.org/zap")
	}
	for _, w := range want {
		if !slices.ContainsFunc(bom.Components, func(c component) bool { return c.Name == w && c.Version != "" }) {
			t.Errorf("%s: no component %s among %d", path, w, len(bom.Components))
		}
	}
}
