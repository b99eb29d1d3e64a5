package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// writeLayout unpacks an archive written by writeArchive into dir as an OCI image
// layout whose index.json names the image index once, by tag: what `crane push DIR
// REF` pushes as one index, keeping its digest. (The archive's index.json also names
// it by digest, for containerd, and crane takes a layout of one entry only.)
func writeLayout(archive, dir string) (v1.Hash, error) {
	ref, digest, err := archiveIndex(archive)
	if err != nil {
		return v1.Hash{}, err
	}
	f, err := os.Open(archive)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var index []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", archive, err)
		}
		name := path.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || (name != "oci-layout" && name != "index.json" && !strings.HasPrefix(name, "blobs/")) {
			continue // directories are made below; manifest.json is docker's
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return v1.Hash{}, err
		}
		if name == "index.json" {
			index = data
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return v1.Hash{}, err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return v1.Hash{}, err
		}
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(index, &idx); err != nil {
		return v1.Hash{}, fmt.Errorf("%s: index.json: %w", archive, err)
	}
	var keep []v1.Descriptor
	for _, m := range idx.Manifests {
		if m.Annotations["io.containerd.image.name"] == ref {
			keep = append(keep, m)
		}
	}
	idx.Manifests = keep
	out, err := json.Marshal(idx)
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, os.WriteFile(filepath.Join(dir, "index.json"), out, 0o644)
}

// runLayout is `weft-image layout`: the archive as an OCI layout directory for crane.
func runLayout(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("weft-image layout", flag.ContinueOnError)
	archive := fs.String("image", "bin/weftd-image.tar", "image archive built by make image")
	dir := fs.String("o", "", "directory to write the OCI layout to (required; must not exist)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-o is required")
	}
	if err := os.Mkdir(*dir, 0o755); err != nil {
		return err
	}
	digest, err := writeLayout(*archive, *dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: OCI layout of index %s\n", *dir, digest)
	return nil
}
