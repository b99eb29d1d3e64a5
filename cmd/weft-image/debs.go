package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// parseDepends takes the package names from `apt-cache depends --recurse` output: the
// unindented lines, less virtual packages ("<name>").
func parseDepends(out []byte) []string {
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == ' ' || line[0] == '<' {
			continue
		}
		seen[strings.TrimSpace(line)] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// debData returns the data.tar of a .deb: the files it installs.
func debData(ctx context.Context, file string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", file).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w%s", file, err, stderrOf(err))
	}
	return out, nil
}

// skipDebPath leaves out what a container never reads: documentation (but the
// copyright files, which the licenses ask to ship), manual pages, translations,
// and glibc's iconv modules.
func skipDebPath(name string) bool {
	if rest, ok := strings.CutPrefix(name, "usr/share/doc/"); ok {
		return !strings.HasSuffix(rest, "/copyright")
	}
	for _, p := range []string{"usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"} {
		if name == p || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	// usr/lib/<multiarch triplet>/gconv/...
	if rest, ok := strings.CutPrefix(name, "usr/lib/"); ok {
		if _, sub, ok := strings.Cut(rest, "/"); ok && (sub == "gconv" || strings.HasPrefix(sub, "gconv/")) {
			return true
		}
	}
	return false
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + string(bytes.TrimSpace(ee.Stderr))
	}
	return ""
}
