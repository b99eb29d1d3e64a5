package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestHelp: weftd --help and weftd help name every command with its line; weftd help
// COMMAND is weftd COMMAND --help; what is not a command is refused.
func TestHelp(t *testing.T) {
	main := []string{"usage: weftd [flags]", "weftd COMMAND [flags]", "Commands:", "-etcd-endpoints", "-kube-subnet-mgr"}
	for _, c := range commands() {
		main = append(main, "  "+c.name+strings.Repeat(" ", 14-len(c.name))+c.summary+"\n")
	}
	cleanup := []string{"usage: weftd cleanup [flags]", "-release-lease", "-firewall-only", "-etcd-endpoints"}
	migrate := []string{"usage: weftd migrate-etcd --from-v2", "-from-v2", "-dry-run"}
	for _, tt := range []struct {
		args []string
		code int
		want []string // in stderr
	}{
		{[]string{"--help"}, 0, main},
		{[]string{"-h"}, 0, main},
		{[]string{"help"}, 0, main},
		{[]string{"help", "cleanup"}, 0, cleanup},
		{[]string{"cleanup", "--help"}, 0, cleanup},
		{[]string{"cleanup", "-h"}, 0, cleanup},
		{[]string{"help", "migrate-etcd"}, 0, migrate},
		{[]string{"migrate-etcd", "--help"}, 0, migrate},
		{[]string{"help", "help"}, 0, []string{"usage: weftd help [COMMAND]"}},
		{[]string{"help", "--help"}, 0, []string{"usage: weftd help [COMMAND]"}},
		{[]string{"help", "nope"}, 2, []string{`weftd help: unknown command "nope"`}},
		{[]string{"help", "cleanup", "more"}, 2, []string{`weftd help: unexpected argument "more"`}},
		{[]string{"nope"}, 2, []string{`weftd: unexpected argument "nope"`}},
		{[]string{"--no-such-flag"}, 2, []string{"flag provided but not defined: -no-such-flag", "Commands:"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, func(string) string { return "" }, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, &stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, &stderr)
				}
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %q, want nothing", &stdout)
			}
		})
	}
}

// TestCommandsListed: the commands are cleanup, peers, status, check-config, migrate-etcd and help,
// each with one line that fits a terminal.
func TestCommandsListed(t *testing.T) {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
		if line := "  " + c.name + "  " + c.summary; len(line) > 100 || !regexp.MustCompile(`^[a-z]`).MatchString(c.summary) {
			t.Errorf("%s: summary %q: one line under 100 columns, starting lower case", c.name, c.summary)
		}
	}
	if got := strings.Join(names, " "); got != "cleanup peers status check-config migrate-etcd help" {
		t.Errorf("commands %q", got)
	}
}
