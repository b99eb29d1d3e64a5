package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// errConflict is wrapped when two sources put different things at one path.
var errConflict = errors.New("conflicting entries")

// entry is one file system object of a layer.
type entry struct {
	hdr  tar.Header
	data []byte // regular files only
}

// tree is the content of one layer, kept by clean relative path ("usr/sbin/iptables").
// Its tar is reproducible: entries sorted by path, owner root, one fixed mtime, no
// access/change times, no user or group names.
type tree struct {
	entries map[string]*entry
	mtime   time.Time
}

func newTree(mtime time.Time) *tree {
	return &tree{entries: map[string]*entry{}, mtime: mtime}
}

// cleanName turns a tar name such as "./usr/lib/" into "usr/lib"; "" is the root.
func cleanName(name string) string {
	p := strings.TrimPrefix(path.Clean("/"+name), "/")
	if p == "." {
		return ""
	}
	return p
}

// add puts an object at name, creating missing parent directories (0755). An object
// already there is kept when it is equal (directories: when both are directories);
// anything else is an errConflict.
func (t *tree) add(hdr tar.Header, data []byte) error {
	name := cleanName(hdr.Name)
	if name == "" {
		return nil // the root directory belongs to the runtime
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeSymlink:
		data = nil
	case tar.TypeReg:
	case tar.TypeLink:
		hdr.Linkname = cleanName(hdr.Linkname)
		data = nil
	default:
		return fmt.Errorf("%s: unsupported tar type %q", name, hdr.Typeflag)
	}
	if dir := path.Dir(name); dir != "." {
		if err := t.add(tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755}, nil); err != nil {
			return err
		}
	}
	e := &entry{hdr: tar.Header{
		Typeflag: hdr.Typeflag,
		Name:     name,
		Linkname: hdr.Linkname,
		Mode:     hdr.Mode & 0o7777,
		Size:     int64(len(data)),
		ModTime:  t.mtime,
		Format:   tar.FormatPAX,
	}, data: data}
	if old, ok := t.entries[name]; ok {
		if old.hdr.Typeflag == tar.TypeDir && e.hdr.Typeflag == tar.TypeDir {
			return nil
		}
		if old.hdr.Typeflag != e.hdr.Typeflag || old.hdr.Linkname != e.hdr.Linkname ||
			old.hdr.Mode != e.hdr.Mode || !bytes.Equal(old.data, e.data) {
			return fmt.Errorf("%w at %s", errConflict, name)
		}
		return nil
	}
	t.entries[name] = e
	return nil
}

// addFile puts a regular file at name.
func (t *tree) addFile(name string, mode int64, data []byte) error {
	return t.add(tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode}, data)
}

// addSymlink puts a symbolic link to target at name.
func (t *tree) addSymlink(name, target string) error {
	return t.add(tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, nil)
}

// addTar merges a tar stream (a Debian package's data.tar) into the tree, leaving out the
// paths skip reports true for. Owners are dropped: everything in the image is root's.
func (t *tree) addTar(r io.Reader, skip func(name string) bool) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := cleanName(hdr.Name)
		if name == "" || skip(name) {
			continue
		}
		var data []byte
		if hdr.Typeflag == tar.TypeReg {
			if data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := t.add(*hdr, data); err != nil {
			return err
		}
	}
}

// has reports whether name is in the tree.
func (t *tree) has(name string) bool {
	_, ok := t.entries[cleanName(name)]
	return ok
}

// tar writes the tree as an uncompressed tar, entries sorted by path. A hard link's
// target sorts before it unless it lies deeper; such links are rejected rather than
// written in an order extractors may not follow.
func (t *tree) tar() ([]byte, error) {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	written := map[string]bool{}
	for _, n := range names {
		e := t.entries[n]
		hdr := e.hdr
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if hdr.Typeflag == tar.TypeLink && !written[hdr.Linkname] {
			return nil, fmt.Errorf("%s: hard link to %s, which is not before it", n, hdr.Linkname)
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		written[n] = true
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
