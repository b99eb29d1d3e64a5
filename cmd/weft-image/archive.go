package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fullRef completes an image reference the way container runtimes do:
// "weftnet/weftd:1" is "docker.io/weftnet/weftd:1", "weftd" is
// "docker.io/library/weftd:latest". It returns the reference and its tag.
func fullRef(ref string) (full, tag string, err error) {
	if ref == "" || strings.ContainsAny(ref, " @") {
		return "", "", fmt.Errorf("image reference %q: want [registry/]name[:tag]", ref)
	}
	repo, tag := ref, "latest"
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		repo, tag = ref[:i], ref[i+1:]
	}
	if repo == "" || tag == "" {
		return "", "", fmt.Errorf("image reference %q: empty name or tag", ref)
	}
	first, _, qualified := strings.Cut(repo, "/")
	if !qualified || !(strings.ContainsAny(first, ".:") || first == "localhost") {
		if !qualified {
			repo = "library/" + repo
		}
		repo = "docker.io/" + repo
	}
	return repo + ":" + tag, tag, nil
}

// writeArchive writes img as one tar that both `ctr images import` and `docker load`
// read, as `docker save` has since Docker 25: an OCI image layout (oci-layout,
// index.json, blobs/sha256/…) and, beside it, Docker's manifest.json pointing at the
// same blobs. Entries are sorted, owned by root and dated mtime: the same image gives
// the same bytes.
func writeArchive(w io.Writer, img v1.Image, ref string, mtime time.Time) error {
	full, tag, err := fullRef(ref)
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	blob := func(d v1.Hash) string { return "blobs/" + d.Algorithm + "/" + d.Hex }

	rawManifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	files[blob(digest)] = rawManifest
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	files[blob(cfgName)] = rawConfig
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		files[blob(d)] = data
		layerPaths = append(layerPaths, blob(d))
	}

	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Digest:    digest,
			Size:      int64(len(rawManifest)),
			Annotations: map[string]string{
				"io.containerd.image.name":          full,
				"org.opencontainers.image.ref.name": tag,
			},
			Platform: &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture},
		}},
	}
	if files["index.json"], err = json.Marshal(index); err != nil {
		return err
	}
	docker := []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: blob(cfgName), RepoTags: []string{full}, Layers: layerPaths}}
	if files["manifest.json"], err = json.Marshal(docker); err != nil {
		return err
	}
	files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)

	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, n := range names {
		// Parent directories first, as docker save writes them.
		for i := strings.IndexByte(n, '/'); i >= 0; i = next(n, i) {
			d := n[:i+1]
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		data := files[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// next returns the index of the next '/' in s after i, or -1.
func next(s string, i int) int {
	j := strings.IndexByte(s[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}
