package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/weftnet/weft/bench/testenv"
)

func TestPin(t *testing.T) {
	const ref = "ghcr.io/weftnet/weftd:0.1.0"
	const next = "ghcr.io/weftnet/weftd:0.2.0-rc.1"
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	old := "sha256:" + strings.Repeat("0", 64)
	for _, tt := range []struct {
		name, ref, in, want string
		okBefore            bool
	}{
		{"bare", ref, "image: " + ref + "\n", "image: " + ref + "@" + d.String() + "\n", false},
		{"old digest", ref, "image: " + ref + "@" + old + "\n", "image: " + ref + "@" + d.String() + "\n", false},
		{"pinned", ref, "image: " + ref + "@" + d.String() + "\n", "image: " + ref + "@" + d.String() + "\n", true},
		{"quoted", ref, `image: "` + ref + `"`, `image: "` + ref + "@" + d.String() + `"`, false},
		{"values digest", ref, "  tag: \"0.1.0\"\n  digest: \"" + old + "\"\n", "  tag: \"0.1.0\"\n  digest: \"" + d.String() + "\"\n", false},
		{"values no digest yet", ref, "  digest: \"\"\n", "  digest: \"" + d.String() + "\"\n", false},
		// The files follow the tag of the image built last, whatever they named.
		{"new tag", next, "image: " + ref + "@" + d.String() + "\n", "image: " + next + "@" + d.String() + "\n", false},
		{"other tag", ref, "image: " + ref + "-next\n", "image: " + ref + "@" + d.String() + "\n", false},
		{"values new tag", next, "  tag: 0.1.0\n  digest: \"" + d.String() + "\"\n", "  tag: \"0.2.0-rc.1\"\n  digest: \"" + d.String() + "\"\n", false},
		{"values tag pinned", next, "  tag: '0.2.0-rc.1'\n  digest: \"" + d.String() + "\"\n", "  tag: \"0.2.0-rc.1\"\n  digest: \"" + d.String() + "\"\n", true},
		// A tag without a digest line below is another image's (flannel_cni's).
		{"values other image", next, "  tag: \"\"\n  x: 1\n  digest: \"" + d.String() + "\"\n", "  tag: \"\"\n  x: 1\n  digest: \"" + d.String() + "\"\n", true},
		// Another repository is not this image.
		{"other repository", ref, "image: ghcr.io/weftnet/weftd-debug:0.1.0\n", "image: ghcr.io/weftnet/weftd-debug:0.1.0\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkPinned([]byte(tt.in), tt.ref, d); (err == nil) != tt.okBefore {
				t.Errorf("checkPinned before: %v, want ok %v", err, tt.okBefore)
			} else if err != nil && !errors.Is(err, errUnpinned) {
				t.Errorf("checkPinned: %v, want errUnpinned", err)
			}
			got := string(pin([]byte(tt.in), tt.ref, d))
			if got != tt.want {
				t.Errorf("pin:\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestPinned: the manifests (and the Helm chart's values, when there is one) name the
// image make image built last by its index digest. It fails after any change to what
// goes into the image until `make pin` has written the new digest.
func TestPinned(t *testing.T) {
	if testing.Short() {
		t.Skip("reads make image's archive: not in -short")
	}
	archive := filepath.Join(os.Getenv("WEFT_BIN"), "weftd-image.tar")
	_, err := os.Stat(archive)
	testenv.Need(t, os.Getenv("WEFT_BIN") != "" && err == nil, "WEFT_BIN/weftd-image.tar (make image)")
	ref, digest, err := archiveIndex(archive)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range pinFiles {
		data, err := os.ReadFile(filepath.Join("..", "..", f))
		if errors.Is(err, os.ErrNotExist) && strings.Contains(f, "chart") {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPinned(data, ref, digest); err != nil {
			t.Errorf("%s: %v: run make pin (after make image) and commit it", f, err)
		}
	}
}

// TestPinnedVersion: the version deploy/ pins means what it says. A released version
// (x.y.z) has its CHANGELOG section (checkRelease, as make release demands); a
// development build (x.y.z-dev, what make image builds unless VERSION is given) is of
// a version not released yet. The chart's version and appVersion are the same.
func TestPinnedVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "weft.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`image: \S+/weftd:(\S+)@sha256:`).FindSubmatch(data)
	if m == nil {
		t.Fatal("deploy/weft.yml names no weftd image by tag and digest")
	}
	tag := string(m[1])
	changelog := filepath.Join("..", "..", "CHANGELOG.md")
	if base, dev := strings.CutSuffix(tag, "-dev"); dev {
		if err := checkRelease(base, changelog); err == nil {
			t.Errorf("deploy/ pins %s, a development build of %s, which CHANGELOG.md says is released: build the next version's", tag, base)
		}
	} else if err := checkRelease(tag, changelog); err != nil {
		t.Errorf("deploy/ pins %s as a release: %v (or pin a development build: make image && make pin)", tag, err)
	}
	chart, err := os.ReadFile(filepath.Join("..", "..", "deploy", "chart", "weft", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"version: " + tag + "\n", `appVersion: "` + tag + `"`} {
		if !strings.Contains(string(chart), want) {
			t.Errorf("Chart.yaml lacks %q: the chart names the version deploy/ pins", want)
		}
	}
}
