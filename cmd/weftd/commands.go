package main

import (
	"flag"
	"fmt"
	"io"
)

// command is one of weftd's commands besides running the daemon.
type command struct {
	name    string
	summary string // its line in weftd's usage
	run     func(args []string, env func(string) string, stdout, stderr io.Writer) int
}

// commands are weftd's commands, in the order its usage lists them.
func commands() []command {
	return []command{
		{"cleanup", "remove what weftd made on this host: devices, routes, firewall rules, subnet.env", runCleanup},
		{"peers", "show the peers as the running weftd's probes find them (state, reason, round trip)", runPeers},
		{"status", "show the whole cluster: which nodes reach every peer, which cannot and why", runStatus},
		{"check-config", "check a network config: what weftd does with it, and where it differs from flanneld", runCheckConfig},
		{"migrate-etcd", "copy the network config and leases from etcd's v2 keyspace to its v3 keyspace", runMigrate},
		{"help", "print this usage, or a command's: weftd help COMMAND (as weftd COMMAND --help)", runHelp},
	}
}

// findCommand is the command named name, if there is one.
func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// mainUsage introduces weftd; the commands and flags follow it.
const mainUsage = `usage: weftd [flags]
       weftd COMMAND [flags]

Without a command, weftd runs weft's overlay network daemon, a drop-in for flanneld:
it leases a subnet of the cluster network, writes subnet.env, watches the other
hosts' leases and carries their traffic with the configured backend.

Commands:
`

// printUsage writes weftd's usage: mainUsage, a line for each command, and the flags
// of fs.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, mainUsage)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nFlags (all but -version also read from FLANNELD_<FLAG>, such as FLANNELD_IP_MASQ, when not given):")
	fs.PrintDefaults()
}

// helpUsage is `weftd help --help`.
const helpUsage = `usage: weftd help [COMMAND]

Prints weftd's usage, or with a COMMAND that command's (as weftd COMMAND --help does).
`

// runHelp is `weftd help [COMMAND]`. Usage goes where --help sends it: to stderr.
func runHelp(args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr, newFlagSet(&options{}, stderr))
		return 0
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "weftd help: unexpected argument %q\n", args[1])
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stderr, helpUsage)
		return 0
	}
	c, ok := findCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "weftd help: unknown command %q (weftd help lists them)\n", args[0])
		return 2
	}
	return c.run([]string{"--help"}, env, stdout, stderr)
}
