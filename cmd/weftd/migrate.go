package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/weftnet/weft/lease/etcd"
)

const migrateUsage = `usage: weftd migrate-etcd --from-v2 [--dry-run] [etcd flags]

Copies the network config and the live leases under --etcd-prefix from etcd's v2
keyspace to its v3 keyspace, for clusters leaving etcd's v2 API: each lease keeps its
key, its value byte for byte and the time it has left (as a v3 lease). Keys v3
already holds are not touched, so running it twice changes nothing. Then restart the
hosts with --etcd-api=v3 (flanneld v0.21 and later speaks only v3): each finds its
lease by its PublicIP and keeps its subnet.
`

// runMigrate is `weftd migrate-etcd`.
func runMigrate(args []string, env func(string) string, stdout, stderr io.Writer) int {
	o := &options{}
	fs := newFlagSet(o, stderr)
	var fromV2, dryRun bool
	fs.BoolVar(&fromV2, "from-v2", false, "copy from etcd's v2 keyspace to its v3 keyspace (required: the only direction)")
	fs.BoolVar(&dryRun, "dry-run", false, "say what would be copied, write nothing")
	fs.Usage = func() { fmt.Fprint(stderr, migrateUsage); fs.PrintDefaults() }
	if err := parseWith(fs, args, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "weftd migrate-etcd: %v\n", err)
		return 2
	}
	if !fromV2 {
		fmt.Fprintln(stderr, "weftd migrate-etcd: say --from-v2 (copying from the v2 to the v3 keyspace is the only migration)")
		return 2
	}
	log := newLogger(stderr, o.verbosity)
	defer log.Sync()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	steps, err := etcd.MigrateV2ToV3(ctx, etcd.Options{
		Endpoints: splitList(o.etcdEndpoints), Prefix: o.etcdPrefix,
		CertFile: o.etcdCertFile, KeyFile: o.etcdKeyFile, CAFile: o.etcdCAFile,
		Username: o.etcdUsername, Password: o.etcdPassword,
	}, dryRun, log)
	verb := ""
	if dryRun {
		verb = " (dry run: nothing written)"
	}
	copied := 0
	for _, s := range steps {
		line := fmt.Sprintf("%-9s %s", s.Action, s.Key)
		if s.TTL > 0 {
			line += fmt.Sprintf(" ttl %s", s.TTL)
		}
		if s.Note != "" {
			line += ": " + s.Note
		}
		fmt.Fprintln(stdout, line)
		if s.Action == etcd.MigrateCopied {
			copied++
		}
	}
	fmt.Fprintf(stdout, "%d of %d keys copied to v3%s\n", copied, len(steps), verb)
	if err != nil {
		fmt.Fprintf(stderr, "weftd migrate-etcd: %v\n", err)
		return 1
	}
	return 0
}
