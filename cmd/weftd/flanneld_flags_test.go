package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// flanneldFlag is one flag of flanneld's --help: its name and its type word ("" for
// a bool, "string", "int", "value").
type flanneldFlag struct{ name, kind string }

// flanneldBinary is $WEFT_BIN/flanneld, else the repository's bin/flanneld (make
// flanneld; make test builds it). Missing: the test skips, or fails with WEFT_E2E=1.
func flanneldBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join("..", "..", "bin", "flanneld")
	if d := os.Getenv("WEFT_BIN"); d != "" {
		path = filepath.Join(d, "flanneld")
	}
	_, err := os.Stat(path)
	testenv.Need(t, err == nil, "flanneld at "+path+" (make flanneld)")
	return path
}

// flanneldHelpFlag matches a flag line of Go's flag.PrintDefaults: "  -name [type]".
var flanneldHelpFlag = regexp.MustCompile(`^  -([A-Za-z0-9_.-]+)(?: (\S+))?$`)

// flanneldFlags runs `flanneld --help` and parses the flags it lists.
func flanneldFlags(t *testing.T, bin string) []flanneldFlag {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", bin, err, out)
	}
	var flags []flanneldFlag
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m := flanneldHelpFlag.FindStringSubmatch(sc.Text()); m != nil {
			flags = append(flags, flanneldFlag{name: m[1], kind: m[2]})
		}
	}
	// A sanity floor: flanneld v0.28 lists 31 flags; far fewer means the format changed.
	if len(flags) < 20 {
		t.Fatalf("parsed only %d flags from %s --help:\n%s", len(flags), bin, out)
	}
	return flags
}

// deliberateFlagDifferences reads the flags docs/compatibility.md lists under
// "Flags weftd does not take" (each as `--name` at the start of a list item).
func deliberateFlagDifferences(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### Flags weftd does not take\n")
	if !ok {
		t.Fatal(`docs/compatibility.md has no "### Flags weftd does not take" section`)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^- `--([A-Za-z0-9_.-]+)`").FindAllStringSubmatch(section, -1) {
		out[m[1]] = true
	}
	return out
}

// TestFlanneldFlags: every flag the real flanneld lists in --help is a flag of
// weftd, of the same kind (a bool stays a bool, so `--ip-masq` alone works), unless
// docs/compatibility.md names it as a deliberate difference.
func TestFlanneldFlags(t *testing.T) {
	flags := flanneldFlags(t, flanneldBinary(t))
	skip := deliberateFlagDifferences(t)
	fs := newFlagSet(&options{}, io.Discard)
	for _, f := range flags {
		if skip[f.name] {
			t.Logf("--%s: a deliberate difference (docs/compatibility.md)", f.name)
			continue
		}
		wf := fs.Lookup(f.name)
		if wf == nil {
			t.Errorf("weftd lacks flanneld's --%s (add it, or list it under docs/compatibility.md's \"Flags weftd does not take\")", f.name)
			continue
		}
		if isBool(wf) != (f.kind == "") {
			t.Errorf("--%s: flanneld's is %q, weftd's is bool=%v", f.name, f.kind, isBool(wf))
		}
	}
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagSample is a value of f's kind that weftd's flag takes, and the flag's
// String() after it is set.
func flagSample(f flanneldFlag, def string) (value, want string) {
	switch {
	case f.kind == "" && def == "true":
		return "false", "false"
	case f.kind == "":
		return "true", "true"
	case f.kind == "int", f.name == "v":
		return "7", "7"
	case f.name == "vmodule":
		return "kube=4", "kube=4"
	case f.name == "log_backtrace_at":
		return "kube.go:42", "kube.go:42"
	}
	return "weft-env-test", "weft-env-test"
}

// TestFlanneldEnv: flanneld reads every flag from FLANNELD_<FLAG> (upper case, dashes
// as underscores) when it is not on the command line; weftd does too, for each flag
// the real flanneld lists. FLANNELD_VERSION is the exception in flanneld (it acts on
// --version before it reads the environment), and in weftd alike.
func TestFlanneldEnv(t *testing.T) {
	flags := flanneldFlags(t, flanneldBinary(t))
	skip := deliberateFlagDifferences(t)
	for _, f := range flags {
		if skip[f.name] {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			fs := newFlagSet(&options{}, io.Discard)
			wf := fs.Lookup(f.name)
			if wf == nil {
				t.Skipf("weftd lacks --%s (TestFlanneldFlags reports it)", f.name)
			}
			name := "FLANNELD_" + strings.ToUpper(strings.ReplaceAll(f.name, "-", "_"))
			if got := envName(f.name); got != name {
				t.Errorf("weftd reads --%s from %s, flanneld from %s", f.name, got, name)
			}
			value, want := flagSample(f, wf.DefValue)
			env := func(k string) string {
				if k == name {
					return value
				}
				return ""
			}
			if err := parseWith(fs, nil, env); err != nil {
				t.Fatalf("%s=%s: %v", name, value, err)
			}
			got := fs.Lookup(f.name).Value.String()
			if f.name == "version" {
				if got != wf.DefValue {
					t.Errorf("%s=%s set --version to %s; flanneld ignores it", name, value, got)
				}
				return
			}
			if got != want {
				t.Errorf("%s=%s: --%s is %q, want %q", name, value, f.name, got, want)
			}
			// The command line wins over the environment, as in flanneld.
			fs = newFlagSet(&options{}, io.Discard)
			if err := parseWith(fs, []string{"--" + f.name + "=" + wf.DefValue}, env); err != nil && wf.DefValue != "" {
				t.Fatalf("--%s=%s: %v", f.name, wf.DefValue, err)
			}
			if got := fs.Lookup(f.name).Value.String(); got == want && want != wf.DefValue {
				t.Errorf("%s overrode --%s given on the command line", name, f.name)
			}
		})
	}
}
