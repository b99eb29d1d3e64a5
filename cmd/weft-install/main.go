// Command weft-install copies a file into place atomically: it writes a temporary file
// beside the destination and renames it over it, so a reader (the container runtime
// watching /etc/cni/net.d, a kubelet running /opt/cni/bin/flannel) sees the old file or the
// new one, never half of one. The weftd image's init containers use it to install the
// flannel CNI plugin and the CNI config.
//
//	weft-install [-mode 0644] SRC DST
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

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
	return install(fs.Arg(0), fs.Arg(1), perm)
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
