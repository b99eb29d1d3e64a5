package main

import (
	"bytes"
	"testing"
)

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
	// --firewall-only keeps the subnet for flanneld, so its lease cannot go.
	if code := run([]string{"cleanup", "--firewall-only", "--release-lease"}, func(string) string { return "" }, &out, &errOut); code != 2 {
		t.Errorf("--firewall-only with --release-lease: exit %d, want 2", code)
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
