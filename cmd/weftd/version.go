package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// commit is the revision weftd was built from when the Go toolchain could not stamp it
// (a git worktree, GOFLAGS=-buildvcs=false): -ldflags "-X main.commit=…"; a "-modified"
// suffix marks uncommitted changes. The Makefile sets it.
var commit = ""

// buildInfo is what --version prints and weft_build_info carries.
type buildInfo struct {
	Version   string // main.version (-ldflags "-X main.version=…")
	Revision  string // vcs.revision, else main.commit, else "unknown"
	Modified  bool   // vcs.modified: the checkout had uncommitted changes
	GoVersion string
}

// readBuildInfo reads the version from main.version and the commit from the build info
// the Go toolchain embeds.
func readBuildInfo() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return makeBuildInfo(version, commit, bi)
}

// makeBuildInfo prefers what the toolchain stamped (vcs.revision, vcs.modified) over
// the -ldflags commit.
func makeBuildInfo(version, commit string, bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: version, Revision: "unknown", GoVersion: runtime.Version()}
	if c, ok := strings.CutSuffix(commit, "-modified"); c != "" {
		b.Revision, b.Modified = c, ok
	}
	if bi == nil {
		return b
	}
	if bi.GoVersion != "" {
		b.GoVersion = bi.GoVersion
	}
	if b.Version == "" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the --version line: "weftd 0.2.0-dev commit 1a2b3c… (modified) go1.26.8".
func (b buildInfo) String() string {
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("weftd %s commit %s %s", b.Version, rev, b.GoVersion)
}
