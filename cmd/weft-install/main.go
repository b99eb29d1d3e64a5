// Command weft-install copies a file into place atomically: it writes a temporary file
// beside the destination and renames it over it, so a reader (the container runtime
// watching /etc/cni/net.d, a kubelet running /opt/cni/bin/flannel) sees the old file or the
// new one, never half of one. The weftd image's init containers use it to install the
// flannel CNI plugin and the CNI config.
//
//	weft-install [-mode 0644] SRC DST
//
// When DST is a CNI config (.conf, .conflist or .json), weft-install then looks at the
// other configs in DST's directory. The container runtime uses the first of them in
// lexical order (libcni's ConfFiles, sorted: containerd's go-cni, CRI-O), so a config
// that sorts before DST shadows it. Canal's (10-canal.conflist, as RKE2's rke2-canal
// chart and Calico's canal.yaml write it: flannel between the nodes, Calico's plugin on
// the node) sorts before 10-flannel.conflist and stays on the node when Canal goes, so
// weft-install moves it aside, after DST is in place, to NAME.weft-backup, which no
// runtime reads (not a CNI extension), and says so; moving the backup back returns the
// node to Canal's config (docs/k3s-rke2.md). Any other config that sorts before DST is
// named in a warning and left alone. Last it prints which config the runtime uses.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// backupSuffix is added to the name of a config moved aside. It is not a CNI config
// extension, so runtimes skip the backup.
const backupSuffix = ".weft-backup"

// cniExts are the extensions containerd (go-cni) and CRI-O give libcni's ConfFiles.
var cniExts = map[string]bool{".conf": true, ".conflist": true, ".json": true}

// displaced are the names of configs that another flannel-based network leaves and
// weft replaces, with the plugin types one of which such a config must name (top-level
// "type" or a "plugins" entry's) to be moved: Canal's, of Calico's plugin or, in old
// releases, flannel's delegating to Calico.
var displaced = map[string][]string{
	"10-canal.conflist": {"calico", "flannel"},
	"10-canal.conf":     {"calico", "flannel"},
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "weft-install:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("weft-install", flag.ContinueOnError)
	mode := fs.String("mode", "", "permission bits of DST in octal (default: those of SRC)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("want SRC DST, got %d arguments", fs.NArg())
	}
	var perm os.FileMode
	if *mode != "" {
		m, err := strconv.ParseUint(*mode, 8, 32)
		if err != nil || m > 0o7777 {
			return fmt.Errorf("-mode %q: not octal permission bits", *mode)
		}
		perm = os.FileMode(m)
	}
	if err := install(fs.Arg(0), fs.Arg(1), perm); err != nil {
		return err
	}
	if !cniExts[filepath.Ext(fs.Arg(1))] {
		return nil
	}
	return clearShadows(fs.Arg(1), os.Stdout)
}

// cniConfigs lists dir's CNI configs as libcni's ConfFiles does (every entry but
// directories with a CNI extension), in the order the runtime tries them.
func cniConfigs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir) // sorted by name, as sort.Strings of ConfFiles
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && cniExts[filepath.Ext(e.Name())] {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// clearShadows moves aside the known configs of another flannel-based network that
// sort before dst, warns about unknown ones, and says which config the runtime uses.
func clearShadows(dst string, log io.Writer) error {
	dir, base := filepath.Dir(dst), filepath.Base(dst)
	names, err := cniConfigs(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if name >= base {
			break
		}
		path := filepath.Join(dir, name)
		types, ok := displaced[name]
		if ok && namesPlugin(path, types) {
			if err := os.Rename(path, path+backupSuffix); err != nil {
				return fmt.Errorf("move %s aside: %w", path, err)
			}
			fmt.Fprintf(log, "moved %s aside to %s: Canal's CNI config, which sorts before %s, so the container runtime would keep using it (move it back to return to Canal)\n",
				path, name+backupSuffix, base)
			continue
		}
		fmt.Fprintf(log, "warning: %s sorts before %s: the container runtime uses it, not %s (left as it is)\n", path, base, base)
	}
	if names, err = cniConfigs(dir); err != nil {
		return err
	}
	if len(names) > 0 {
		fmt.Fprintf(log, "the container runtime's CNI config in %s: %s\n", dir, names[0])
	}
	return nil
}

// namesPlugin says whether the CNI config (a .conf or a .conflist) at path names a
// plugin of one of types, at the top or in its plugins list.
func namesPlugin(path string, types []string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var conf struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if json.Unmarshal(data, &conf) != nil {
		return false
	}
	all := []string{conf.Type}
	for _, p := range conf.Plugins {
		all = append(all, p.Type)
	}
	for _, t := range all {
		for _, want := range types {
			if strings.EqualFold(t, want) {
				return true
			}
		}
	}
	return false
}

// install copies src to dst through a temporary file in dst's directory; perm 0 keeps
// src's permission bits.
func install(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	if perm == 0 {
		perm = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
