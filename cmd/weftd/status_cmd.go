package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/lease/etcd"
	"github.com/weftnet/weft/lease/kube"
	"github.com/weftnet/weft/paths"
	"github.com/weftnet/weft/status"
)

const statusUsage = `usage: weftd status [-o text|json] [--kube-subnet-mgr | etcd flags] [--peers --healthz-port PORT]

Shows the whole cluster on one screen: a summary line (nodes, how many reach every
peer, the ways of all peers: direct, punched, relayed), the nodes with a problem (the
peers they cannot reach, and why), and a table of every node (site, backend, outside
address, weft version, peers, ways, last change).

With --kube-subnet-mgr it reads the Node objects only (kube-flannel's rights: nodes
get, list, watch): the annotations flanneld and weftd publish and weftd's
WeftPeersReachable condition (--kubeconfig-file or --kube-api-url, else in-cluster).
Otherwise it reads the leases from etcd (the etcd flags, as weftd's), and with --peers
asks each host's GET /peers on its public address and --healthz-port (weftd's
--healthz-ip must let it in).

Exit status 0 when no node reports an unreachable peer, 1 when one does, 2 when the
cluster cannot be read.
`

// runStatus is `weftd status`.
func runStatus(args []string, env func(string) string, stdout, stderr io.Writer) int {
	o := &options{}
	fs := newFlagSet(o, stderr)
	var output string
	var askPeers bool
	fs.StringVar(&output, "o", "text", "output: text (one screen) or json (for scripts)")
	fs.BoolVar(&askPeers, "peers", false, "etcd mode: ask each host's GET /peers on its public address and --healthz-port")
	fs.Usage = func() { fmt.Fprint(stderr, statusUsage); fs.PrintDefaults() }
	err := parseWith(fs, args, env)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	switch {
	case err != nil:
	case output != "text" && output != "json":
		err = fmt.Errorf("-o %q: text or json", output)
	case askPeers && o.kubeSubnetMgr:
		err = errors.New("--peers is for etcd mode: in Kubernetes mode each node's condition tells its peers")
	case askPeers && o.healthzPort == 0:
		err = errors.New("--peers needs --healthz-port: the port the hosts' weftd serve /peers on")
	}
	if err != nil {
		fmt.Fprintf(stderr, "weftd status: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var c status.Cluster
	if o.kubeSubnetMgr {
		c, err = kubeStatus(ctx, o)
	} else {
		c, err = etcdStatus(ctx, o, stderr)
		if err == nil && askPeers {
			askEach(&c, o.healthzPort)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "weftd status: %v\n", err)
		return 2
	}
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			status.Cluster
			Summary status.Summary `json:"summary"`
			Healthy bool           `json:"healthy"`
		}{c, c.Summary(), c.Healthy()})
	} else {
		err = c.WriteText(stdout, time.Now())
	}
	if err != nil {
		fmt.Fprintf(stderr, "weftd status: %v\n", err)
		return 2
	}
	if !c.Healthy() {
		return 1
	}
	return 0
}

// kubeStatus reads the cluster from its Node objects.
func kubeStatus(ctx context.Context, o *options) (status.Cluster, error) {
	prefix, err := kube.KeyPrefix(o.kubeAnnotation)
	if err != nil {
		return status.Cluster{}, err
	}
	rc, err := kube.ClientConfig(o.kubeAPIURL, o.kubeconfigFile)
	if err != nil {
		return status.Cluster{}, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return status.Cluster{}, fmt.Errorf("kubernetes client: %w", err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return status.Cluster{}, fmt.Errorf("list nodes: %w", err)
	}
	return status.FromNodes(nodes.Items, prefix, daemon.PeersConditionType), nil
}

// etcdStatus reads the cluster from the leases in etcd.
func etcdStatus(ctx context.Context, o *options, stderr io.Writer) (status.Cluster, error) {
	reg, err := etcd.NewRegistry(o.etcdOptions(), newLogger(stderr, o.verbosity))
	if err != nil {
		return status.Cluster{}, err
	}
	defer reg.Close()
	l, err := reg.List(ctx)
	if err != nil {
		return status.Cluster{}, fmt.Errorf("list the leases: %w", err)
	}
	return status.FromLeases(l.Leases), nil
}

// askEach asks every host's GET /peers at once, on its outside address and port.
func askEach(c *status.Cluster, port int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, n := range c.Nodes {
		host := n.Outside
		if ap, err := netip.ParseAddrPort(host); err == nil {
			host = ap.Addr().String()
		}
		url := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/peers"
		wg.Go(func() {
			rep, _, err := fetchPeers(url)
			if err != nil {
				rep = paths.Report{}
			}
			mu.Lock()
			c.SetPeers(i, rep, err)
			mu.Unlock()
		})
	}
	wg.Wait()
}
