package main

import (
	"bytes"
	"strings"
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
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		// --firewall-only keeps the subnet for flanneld, so its lease cannot go.
		{"firewall-only and release-lease", []string{"--firewall-only", "--release-lease"}, "keeps its subnet"},
		{"firewall-only and uninstall", []string{"--firewall-only", "--uninstall"}, "keeps its subnet"},
		{"remove-files alone", []string{"--remove-files=/etc/cni/net.d/10-flannel.conflist"}, "needs --uninstall"},
		{"kube without a node", []string{"--kube-subnet-mgr"}, "needs the node"},
	} {
		errOut.Reset()
		code := run(append([]string{"cleanup"}, tc.args...), func(string) string { return "" }, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, %q; want 2 and %q", tc.name, code, errOut.String(), tc.want)
		}
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
