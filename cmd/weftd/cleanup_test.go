package main

import (
	"bytes"
	"reflect"
	"testing"
)

func TestWeftRules(t *testing.T) {
	ours := map[string]bool{"WEFT-POSTRTG": true}
	tests := []struct {
		line string
		args []string
		weft bool
	}{
		{`-A POSTROUTING -m comment --comment "weft masq" -j WEFT-POSTRTG`,
			[]string{"-A", "POSTROUTING", "-m", "comment", "--comment", "weft masq", "-j", "WEFT-POSTRTG"}, true},
		{`-A FORWARD -s 198.18.0.0/16 -m comment --comment "weft forward" -j ACCEPT`,
			[]string{"-A", "FORWARD", "-s", "198.18.0.0/16", "-m", "comment", "--comment", "weft forward", "-j", "ACCEPT"}, true},
		{`-A POSTROUTING -g WEFT-POSTRTG`, []string{"-A", "POSTROUTING", "-g", "WEFT-POSTRTG"}, true},
		{`-A FORWARD -m comment --comment "flanneld forward" -j ACCEPT`,
			[]string{"-A", "FORWARD", "-m", "comment", "--comment", "flanneld forward", "-j", "ACCEPT"}, false},
		{`-A POSTROUTING -j KUBE-POSTROUTING`, []string{"-A", "POSTROUTING", "-j", "KUBE-POSTROUTING"}, false},
		{`-A X -m comment --comment "say \"weft\"" -j ACCEPT`,
			[]string{"-A", "X", "-m", "comment", "--comment", `say "weft"`, "-j", "ACCEPT"}, false},
		{`-P FORWARD ACCEPT`, []string{"-P", "FORWARD", "ACCEPT"}, false},
		{``, nil, false},
	}
	for _, tt := range tests {
		f := splitRule(tt.line)
		if !reflect.DeepEqual(f, tt.args) {
			t.Errorf("splitRule(%q) = %q, want %q", tt.line, f, tt.args)
		}
		if got := len(f) > 1 && f[0] == "-A" && isWeftRule(f, ours); got != tt.weft {
			t.Errorf("%q: weft's %v, want %v", tt.line, got, tt.weft)
		}
	}
}

// TestCleanupFlags: cleanup takes weftd's flags (FLANNELD_* too) and its own, and
// rejects what it does not know.
func TestCleanupFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"cleanup", "--no-such-flag"}, func(string) string { return "" }, &out, &errOut); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2 (%s)", code, errOut.String())
	}
	if code := run([]string{"cleanup", "extra"}, func(string) string { return "" }, &out, &errOut); code != 2 {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
	// FLANNELD_* fills what the command line leaves out; the command line wins.
	o := &options{}
	fs := newFlagSet(o, &errOut)
	env := map[string]string{"FLANNELD_SUBNET_FILE": "/env/subnet.env", "FLANNELD_ETCD_PREFIX": "/env/prefix"}
	if err := parseWith(fs, []string{"--etcd-prefix=/cli/prefix"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if o.subnetFile != "/env/subnet.env" || o.etcdPrefix != "/cli/prefix" {
		t.Errorf("subnet file %q, prefix %q", o.subnetFile, o.etcdPrefix)
	}
}
