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

// writeArchive writes the image index idx as one tar that both `ctr images import`
// and `docker load` read, as `docker save` has since Docker 25: an OCI image layout
// (oci-layout, index.json, blobs/sha256/…) and, beside it, Docker's manifest.json
// pointing at the blobs of host, the image of the machine's architecture (docker load
// takes one platform). index.json names the index twice for containerd: by tag, and by
// digest (repo@sha256:…), the name the CRI looks a pinned image reference up by.
// Entries are sorted, owned by root and dated mtime: the same index gives the same bytes.
func writeArchive(w io.Writer, idx v1.ImageIndex, host v1.Image, ref string, mtime time.Time) error {
	full, tag, err := fullRef(ref)
	if err != nil {
		return err
	}
	repo := strings.TrimSuffix(full, ":"+tag)
	files := map[string][]byte{}
	blob := func(d v1.Hash) string { return "blobs/" + d.Algorithm + "/" + d.Hex }

	rawIndex, err := idx.RawManifest()
	if err != nil {
		return err
	}
	indexDigest, err := idx.Digest()
	if err != nil {
		return err
	}
	files[blob(indexDigest)] = rawIndex
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	hostDigest, err := host.Digest()
	if err != nil {
		return err
	}
	var docker []dockerManifest
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		paths, err := addImageBlobs(files, img, blob)
		if err != nil {
			return err
		}
		if desc.Digest == hostDigest {
			docker = append(docker, dockerManifest{Config: paths[0], RepoTags: []string{full}, Layers: paths[1:]})
		}
	}
	if len(docker) != 1 {
		return fmt.Errorf("the host image %s is not in the index", hostDigest)
	}

	layout := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, name := range []string{full, repo + "@" + indexDigest.String()} {
		a := map[string]string{"io.containerd.image.name": name}
		if name == full {
			a["org.opencontainers.image.ref.name"] = tag
		}
		layout.Manifests = append(layout.Manifests, v1.Descriptor{
			MediaType: types.OCIImageIndex, Digest: indexDigest, Size: int64(len(rawIndex)), Annotations: a,
		})
	}
	if files["index.json"], err = json.Marshal(layout); err != nil {
		return err
	}
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

// dockerManifest is one image of docker save's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// addImageBlobs puts img's manifest, config and compressed layers into files and
// returns the paths of the config and the layers, in order.
func addImageBlobs(files map[string][]byte, img v1.Image, blob func(v1.Hash) string) ([]string, error) {
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	files[blob(digest)] = rawManifest
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	files[blob(cfgName)] = rawConfig
	paths := []string{blob(cfgName)}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		files[blob(d)] = data
		paths = append(paths, blob(d))
	}
	return paths, nil
}
