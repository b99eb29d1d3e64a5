package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/weftnet/weft/paths"
)

const peersUsage = `usage: weftd peers [--json] [--healthz-ip IP] [--healthz-port PORT]

Shows the peers of the weftd running on this host as its probes find them: for each
peer subnet its state (up, degraded, down, unknown), the reason and what to check, the
round trip through the tunnel, the loss, the path MTU and since when. It reads GET
/peers from the daemon's health server (--healthz-ip and --healthz-port, or
FLANNELD_HEALTHZ_IP and FLANNELD_HEALTHZ_PORT, as the daemon was given them; an
unspecified address is asked on loopback). Exit status 0 when no peer is down, 1 when
one is, 2 when the daemon cannot be asked.
`

// runPeers is `weftd peers`.
func runPeers(args []string, env func(string) string, stdout, stderr io.Writer) int {
	o := &options{}
	fs := newFlagSet(o, stderr)
	var asJSON bool
	fs.BoolVar(&asJSON, "json", false, "print GET /peers' JSON as the daemon gives it")
	fs.Usage = func() { fmt.Fprint(stderr, peersUsage); fs.PrintDefaults() }
	if err := parseWith(fs, args, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "weftd peers: %v\n", err)
		return 2
	}
	if o.healthzPort == 0 {
		fmt.Fprintln(stderr, "weftd peers: --healthz-port is 0: the daemon serves no /peers then")
		return 2
	}
	host := o.healthzIP
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(o.healthzPort)) + "/peers"
	rep, raw, err := fetchPeers(url)
	if err != nil {
		fmt.Fprintf(stderr, "weftd peers: %v\n", err)
		return 2
	}
	if asJSON {
		_, _ = stdout.Write(raw)
	} else if err := rep.WriteTable(stdout, time.Now()); err != nil {
		fmt.Fprintf(stderr, "weftd peers: %v\n", err)
		return 2
	}
	for _, p := range rep.Peers {
		if p.State == paths.StateDown {
			return 1
		}
	}
	return 0
}

// fetchPeers asks the daemon's /peers.
func fetchPeers(url string) (paths.Report, []byte, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return paths.Report{}, nil, fmt.Errorf("is weftd running with this health address? %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return paths.Report{}, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return paths.Report{}, nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var rep paths.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return paths.Report{}, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return rep, raw, nil
}
