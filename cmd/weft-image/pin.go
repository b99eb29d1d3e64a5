package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// errUnpinned is wrapped when a file does not name the built image by its digest.
var errUnpinned = errors.New("not pinned to the built image")

// pinFiles are the files that name weft's image, relative to the module's root; the
// chart's values.yaml holds the digest alone, on a `digest: "sha256:…"` line.
var pinFiles = []string{"deploy/weft.yml", "deploy/weft-cleanup.yml", "deploy/weft-uninstall.yml", "deploy/chart/weft/values.yaml"}

// archiveIndex returns the reference (by tag) and the index digest an archive written
// by writeArchive holds, from its index.json.
func archiveIndex(path string) (string, v1.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", v1.Hash{}, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", v1.Hash{}, fmt.Errorf("%s: no index.json", path)
		}
		if err != nil {
			return "", v1.Hash{}, fmt.Errorf("%s: %w", path, err)
		}
		if h.Name != "index.json" {
			continue
		}
		var idx v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return "", v1.Hash{}, fmt.Errorf("%s: index.json: %w", path, err)
		}
		for _, m := range idx.Manifests {
			if m.Annotations["org.opencontainers.image.ref.name"] != "" {
				return m.Annotations["io.containerd.image.name"], m.Digest, nil
			}
		}
		return "", v1.Hash{}, fmt.Errorf("%s: index.json names no tagged image", path)
	}
}

// digestLine is a Helm values line holding the image's digest, or none yet ("").
var digestLine = regexp.MustCompile(`(?m)^(\s*digest:\s*)(?:""|''|"?(sha256:[0-9a-f]{64})"?)[ \t]*$`)

// tagLine is a Helm values line holding the image's tag: the `tag:` line right above
// a digest line (flannel_cni's tag, with no digest below it, is not weft's image).
var tagLine = regexp.MustCompile(`(?m)^([ \t]*tag:[ \t]*)("[^"\n]*"|'[^'\n]*'|[^\s"'#]*)([ \t]*\n[ \t]*digest:)`)

// splitRef splits a reference with a tag into repository and tag.
func splitRef(ref string) (repo, tag string) {
	i := strings.LastIndexByte(ref, ':')
	if i <= strings.LastIndexByte(ref, '/') {
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}

// refPattern matches the repository of ref with any tag, bare or with a digest, as a
// whole word: group 1 is the tag, group 2 the @digest.
func refPattern(ref string) *regexp.Regexp {
	repo, _ := splitRef(ref)
	return regexp.MustCompile(regexp.QuoteMeta(repo) + `:(\w[\w.-]{0,127})(@sha256:[0-9a-f]{64})?([^\w.@-]|$)`)
}

// pin rewrites every mention of ref's repository (with any tag, bare or with any
// digest) to ref@digest, every `digest: "sha256:…"` line to digest and the `tag:`
// line above it to ref's tag: the files follow the tag of the image built last.
func pin(data []byte, ref string, digest v1.Hash) []byte {
	_, tag := splitRef(ref)
	data = refPattern(ref).ReplaceAll(data, []byte(ref+"@"+digest.String()+"${3}"))
	data = tagLine.ReplaceAll(data, []byte(`${1}"`+tag+`"${3}`))
	return digestLine.ReplaceAll(data, []byte(`${1}"`+digest.String()+`"`))
}

// checkPinned returns an errUnpinned error when data names ref's repository with
// another tag, without digest or with another digest, holds a digest line with
// another digest or a tag line with another tag, or names neither.
func checkPinned(data []byte, ref string, digest v1.Hash) error {
	repo, tag := splitRef(ref)
	var bad []string
	pinned := 0
	for _, m := range refPattern(ref).FindAllSubmatch(data, -1) {
		if string(m[1]) == tag && string(m[2]) == "@"+digest.String() {
			pinned++
		} else {
			bad = append(bad, repo+":"+string(m[1])+string(m[2]))
		}
	}
	for _, m := range tagLine.FindAllSubmatch(data, -1) {
		if strings.Trim(string(m[2]), `"'`) != tag {
			bad = append(bad, "tag: "+string(m[2]))
		}
	}
	for _, m := range digestLine.FindAllSubmatch(data, -1) {
		if string(m[2]) == digest.String() {
			pinned++
		} else {
			bad = append(bad, "digest: "+string(m[2]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: names %s, want %s@%s", errUnpinned, strings.Join(bad, ", "), ref, digest)
	}
	if pinned == 0 {
		return fmt.Errorf("%w: names neither %s@%s nor a digest line", errUnpinned, ref, digest)
	}
	return nil
}

// runPin rewrites (or with -check, checks) the files that name the image, from the
// digest of a built archive. Files that do not exist are skipped.
func runPin(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("weft-image pin", flag.ContinueOnError)
	archive := fs.String("image", "bin/weftd-image.tar", "image archive built by make image")
	check := fs.Bool("check", false, "only check that the files name the archive's digest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		files = pinFiles
	}
	ref, digest, err := archiveIndex(*archive)
	if err != nil {
		return err
	}
	var failed []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if *check {
			if err := checkPinned(data, ref, digest); err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", f, err))
			}
			continue
		}
		out := pin(data, ref, digest)
		if err := checkPinned(out, ref, digest); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := writeFile(f, func(w io.Writer) error { _, err := w.Write(out); return err }); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s@%s\n", filepath.Clean(f), ref, digest)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s\nrun make pin", strings.Join(failed, "\n"))
	}
	return nil
}
