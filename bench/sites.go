package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/bench/lab"
)

// The rows of the sites run: weftd's wireguard backend (userspace device) across the
// sites lab, each way on the same hosts and links.
const (
	// WireGuardDirect is site host a1 to public host p: a1's NAT masquerades, p is
	// dialed at its address (weftd's "direct").
	WireGuardDirect = "wireguard-direct"
	// WireGuardPunched is a1 to b1, two sites behind two NATs: both dial the other's
	// NAT address, router to router.
	WireGuardPunched = "wireguard-punched"
	// WireGuardRelayed is a1 to b1 with UDP between the two NATs dropped: their
	// WireGuard datagrams go through p's or q's path socket, sealed.
	WireGuardRelayed = "wireguard-relayed"
)

// sitesSpec is the lab of the sites run: public hosts p and q (the relays), sites a
// and b of one host each, both behind masquerading routers.
var sitesSpec = lab.NATSpec{Public: []string{"p", "q"},
	Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1"}}, {Name: "b", Hosts: []string{"b1"}}}}

// sitesHealthz is where the sites run's daemons serve GET /peers, in each host's
// namespace.
const sitesHealthz = "127.0.0.1:8475"

// RunSites measures weftd's wireguard ways (direct, punched, relayed) in the sites
// lab beside the underlay between a1 and p (host to host across a's NAT), which
// the ratios are to. Each way is checked on GET /peers before it is measured: a row
// whose path is not the way it names gets an error, not figures.
func RunSites(ctx context.Context, weftd string, o Options, log *zap.Logger) (*Report, error) {
	o = o.withDefaults()
	if o.Family != 4 {
		return nil, fmt.Errorf("family %d: the sites lab is IPv4", o.Family)
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	rep := &Report{Started: time.Now(), Reps: o.Reps, Family: 4, DurationS: o.Duration.Seconds()}
	rep.record(weftd)
	for _, name := range []string{Underlay, WireGuardDirect, WireGuardPunched, WireGuardRelayed} {
		rep.Rows = append(rep.Rows, Row{Subject: name, Kind: KindWeft})
	}
	rep.Rows[0].Kind = KindReference
	fmt.Fprintln(progress, "building the sites lab: p, q public; a1, b1 behind NATs; etcd")
	l, err := lab.New(ctx, lab.Spec{NoEtcd: true, StateFile: o.StateFile}, log)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	sites, err := l.BuildNAT(ctx, sitesSpec)
	if err != nil {
		return nil, err
	}
	if err := l.SetConfig(ctx, "/weft-bench/sites", lab.NetworkConfigWith("wireguard", `"Device":"userspace"`)); err != nil {
		return nil, err
	}
	daemons := map[string]*lab.Daemon{}
	pods := map[string]*lab.Pod{}
	for _, name := range []string{"p", "q", "a1", "b1"} {
		h := l.Host(name)
		env, err := l.WireGuardEnv(h)
		if err != nil {
			return nil, err
		}
		args := []string{"--etcd-prefix=/weft-bench/sites", "--healthz-ip=127.0.0.1", "--healthz-port=8475"}
		if h.LAN != lab.Internet {
			args = append(args, "--site="+h.LAN)
		}
		d, err := l.Start(ctx, h, lab.DaemonSpec{Binary: weftd, Weft: true, Args: args, Env: env})
		if err != nil {
			return nil, err
		}
		daemons[name] = d
	}
	for name, d := range daemons {
		env, err := d.WaitSubnetEnv(ctx, 20*time.Second)
		if err != nil {
			return nil, err
		}
		if pods[name], err = l.AttachPod(ctx, l.Host(name), env); err != nil {
			return nil, err
		}
	}
	a1, p := l.Host("a1"), l.Host("p")
	pod := func(from, to string, ds ...string) Path {
		path := Path{Client: pods[from].NS, Server: pods[to].NS, Addr: pods[to].Addr}
		for _, d := range ds {
			path.Daemons = append(path.Daemons, daemons[d])
		}
		return path
	}
	ways := []struct {
		row  int
		path Path
		peer string                 // whose subnet GET /peers on a1 is asked about
		want func(string) bool      // the path /peers must say
		prep func() (func(), error) // sets the way up; its undo
	}{
		{0, Path{Client: a1.NS, Server: p.NS, Addr: p.Addr}, "", nil, nil},
		{1, pod("a1", "p", "a1", "p"), "p", func(s string) bool { return s == "direct" }, nil},
		{2, pod("a1", "b1", "a1", "b1"), "b1", func(s string) bool { return s == "punched" }, nil},
		{3, pod("a1", "b1", "a1", "b1", "p", "q"), "b1", func(s string) bool { return strings.HasPrefix(s, "relay via ") },
			func() (func(), error) {
				unblock, err := l.BlockUDP(ctx, sites["a"].Outside, sites["b"].Outside)
				if err != nil {
					return nil, err
				}
				return func() { _ = unblock(context.Background()) }, nil
			}},
	}
	for _, w := range ways {
		row := &rep.Rows[w.row]
		undo := func() {}
		if w.prep != nil {
			if undo, err = w.prep(); err != nil {
				row.Errors = append(row.Errors, err.Error())
				continue
			}
		}
		if w.want != nil {
			fmt.Fprintf(progress, "  waiting for %s (a1 -> %s)\n", row.Subject, w.peer)
			if err := awaitWay(ctx, a1, daemons[w.peer].Env().Subnet.String(), w.want, 60*time.Second); err != nil {
				undo()
				row.Errors = append(row.Errors, err.Error())
				fmt.Fprintf(progress, "  %-18s FAILED: %v\n", row.Subject, err)
				continue
			}
		}
		for r := 0; r < o.Reps; r++ {
			fmt.Fprintf(progress, "rep %d/%d  %-18s ", r+1, o.Reps, row.Subject)
			f, errs := measure(ctx, w.path, o)
			if ctx.Err() != nil {
				undo()
				return nil, ctx.Err()
			}
			row.Reps = append(row.Reps, f)
			row.Errors = append(row.Errors, errs...)
			fmt.Fprintln(progress, summary(f, errs))
		}
		undo()
	}
	rep.Finish()
	return rep, l.Close()
}

// awaitWay waits until GET /peers on h says, for the peer of subnet, a path want
// takes and state up; its error gives the last answer.
func awaitWay(ctx context.Context, h *lab.Host, subnet string, want func(string) bool, within time.Duration) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.NS.DialContext}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(within)
	last := "no answer"
	for {
		var body struct {
			Peers []struct {
				Subnet, State, Path, PathDetail string
			}
		}
		resp, err := hc.Get("http://" + sitesHealthz + "/peers")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
		}
		if err != nil {
			last = err.Error()
		}
		for _, p := range body.Peers {
			if p.Subnet == subnet {
				if want(p.Path) && p.State == "up" {
					return nil
				}
				last = fmt.Sprintf("path %q (%s), state %q", p.Path, p.PathDetail, p.State)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GET /peers on %s, peer %s after %v: %s", h.Name, subnet, within, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
