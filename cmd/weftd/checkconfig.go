package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
	"github.com/weftnet/weft/lease/kube"
)

const checkConfigUsage = `usage: weftd check-config [--file PATH | --kube-configmap NAMESPACE/NAME] [flags]

Reads a network config (net-conf.json) and says, without changing anything, what weftd
would do with it (network, subnets, backend and options, firewall), every deliberate
difference from flanneld that applies (docs/compatibility.md), and whether weftd would
refuse it, with the reason weftd would give at start. The checks are weftd's own: the
network config's parsing and each backend's option checks. The config comes from:

  --file PATH          a file; - reads standard input
  --kube-configmap     the ConfigMap's key net-conf.json (--kube-configmap-key), as
                       weftd reads it (--kubeconfig-file, --kube-api-url, else
                       in-cluster); with --kube-subnet-mgr and no --file, the default
                       ConfigMap kube-flannel/kube-flannel-cfg. Needs get on it only.
  otherwise etcd       <--etcd-prefix>/config through --etcd-endpoints, with the
                       --etcd-* flags (API v3 or v2, TLS files, user) as weftd reads it

Every flag is also read from FLANNELD_<FLAG>, as weftd does. Defaults that follow the
underlay's MTU are shown for --underlay-mtu bytes. Exit status: 0 when weftd would run
the config, 1 when it would refuse it, 2 for a usage error or a config that cannot be
read.
`

// defaultConfigMap is where kube-flannel.yml keeps net-conf.json.
const defaultConfigMap = "kube-flannel/kube-flannel-cfg"

// checkOptions are check-config's flags: weftd's own (etcd, Kubernetes, FLANNELD_*)
// and where the config comes from.
type checkOptions struct {
	*options
	file         string
	configMap    string
	configMapKey string
	underlayMTU  int
}

// runCheckConfig is `weftd check-config`.
func runCheckConfig(args []string, env func(string) string, stdout, stderr io.Writer) int {
	return checkConfig(args, env, os.Stdin, stdout, stderr)
}

// checkConfig is runCheckConfig with its standard input.
func checkConfig(args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	co := checkOptions{options: &options{}}
	fs := newFlagSet(co.options, stderr)
	fs.StringVar(&co.file, "file", "", "read the config from this file (- for standard input)")
	fs.StringVar(&co.configMap, "kube-configmap", "", "read the config from this ConfigMap, NAMESPACE/NAME (with --kube-subnet-mgr: "+defaultConfigMap+")")
	fs.StringVar(&co.configMapKey, "kube-configmap-key", "net-conf.json", "the ConfigMap's key that holds the config")
	fs.IntVar(&co.underlayMTU, "underlay-mtu", 1500, "the external interface's MTU, for the defaults that follow it")
	fs.Usage = func() { fmt.Fprint(stderr, checkConfigUsage); fs.PrintDefaults() }
	err := parseWith(fs, args, env)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = co.check()
	}
	if err == nil {
		co.tuning, err = parseKnobs(env)
	}
	if err != nil {
		fmt.Fprintf(stderr, "weftd check-config: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, data, err := co.read(ctx, stdin, stderr)
	fmt.Fprintf(stdout, "source: %s\n", src)
	if err != nil {
		fmt.Fprintf(stderr, "weftd check-config: %v\n", err)
		return 2
	}
	v := verdictOf(data, co.kubeMode(), co.tuning, co.underlayMTU)
	v.write(stdout)
	if v.err != nil {
		return 1
	}
	return 0
}

// check refuses flags that contradict each other.
func (co *checkOptions) check() error {
	switch {
	case co.file != "" && co.configMap != "":
		return errors.New("--file and --kube-configmap: give one source")
	case co.underlayMTU < 68 || co.underlayMTU > 65535:
		return fmt.Errorf("--underlay-mtu=%d: not in 68-65535", co.underlayMTU)
	}
	if co.configMap != "" {
		if _, _, err := splitConfigMap(co.configMap); err != nil {
			return err
		}
	}
	return nil
}

// kubeMode tells whether the config is checked for Kubernetes mode: read from a
// ConfigMap, or --kube-subnet-mgr given.
func (co *checkOptions) kubeMode() bool { return co.kubeSubnetMgr || co.configMap != "" }

// splitConfigMap reads NAMESPACE/NAME.
func splitConfigMap(s string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(s, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--kube-configmap=%q: want NAMESPACE/NAME", s)
	}
	return namespace, name, nil
}

// read fetches the config from the source the flags name, and says which it is.
func (co *checkOptions) read(ctx context.Context, stdin io.Reader, stderr io.Writer) (string, []byte, error) {
	switch {
	case co.file == "-":
		data, err := io.ReadAll(io.LimitReader(stdin, 1<<20))
		if err != nil {
			return "standard input", nil, fmt.Errorf("standard input: %w", err)
		}
		return "standard input", data, nil
	case co.file != "":
		data, err := os.ReadFile(co.file)
		return "file " + co.file, data, err
	case co.kubeMode():
		cm := co.configMap
		if cm == "" {
			cm = defaultConfigMap
		}
		namespace, name, err := splitConfigMap(cm)
		src := fmt.Sprintf("ConfigMap %s key %s", cm, co.configMapKey)
		if err != nil {
			return src, nil, err
		}
		cfg, err := kube.ClientConfig(co.kubeAPIURL, co.kubeconfigFile)
		if err != nil {
			return src, nil, err
		}
		data, err := kube.ConfigMapValue(ctx, cfg, namespace, name, co.configMapKey)
		return src, data, err
	}
	eo := co.etcdOptions()
	prefix := eo.Prefix
	if prefix == "" {
		prefix = lease.DefaultPrefix
	}
	src := fmt.Sprintf("etcd %s key %s/config (API %s)", strings.Join(eo.Endpoints, ","), "/"+strings.Trim(prefix, "/"), eo.API)
	log := newLogger(stderr, co.verbosity)
	defer log.Sync()
	reg, err := etcd.NewRegistry(eo, log)
	if err != nil {
		return src, nil, err
	}
	defer reg.Close()
	data, err := reg.Config(ctx)
	if errors.Is(err, etcd.ErrNoConfig) {
		err = fmt.Errorf("%w (weftd would wait for it)", err)
	}
	return src, data, err
}

// verdict is what check-config says of a config: what weftd does with it, where that
// differs from flanneld, and the error weftd would stop with (nil: it runs).
type verdict struct {
	notes []encap.Note
	err   error
}

// verdictOf checks data as weftd does at start: lease.ParseConfig, then the backend's
// checks (factory.Check) on an underlay of underlayMTU bytes, in Kubernetes mode or
// etcd mode.
func verdictOf(data []byte, kubeMode bool, tuning settings, underlayMTU int) verdict {
	cfg, err := lease.ParseConfig(data)
	if err != nil {
		return verdict{err: err, notes: []encap.Note{encap.Differs("bad-config-exits",
			"flanneld logs a bad network config and tries again every second for ever; weftd exits with status 1, naming the field")}}
	}
	notes := networkNotes(cfg, kubeMode, tuning)
	be, err := factory.Check(cfg, encap.ExternalInterface{MTU: underlayMTU}, tuning.withProbe())
	return verdict{notes: append(notes, be...), err: err}
}

// networkNotes are what weftd does with the network config beside the backend, and the
// differences from flanneld that follow from the config and the mode.
func networkNotes(cfg *lease.Config, kubeMode bool, tuning settings) []encap.Note {
	var notes []encap.Note
	if cfg.EnableIPv4 {
		notes = append(notes, encap.Do(fmt.Sprintf("Network %v: subnets of /%d from %v to %v (%d subnets)",
			cfg.Network, cfg.SubnetLen, cfg.SubnetMin, cfg.SubnetMax, cfg.Index(cfg.SubnetMax)-cfg.Index(cfg.SubnetMin)+1)))
	} else {
		notes = append(notes, encap.Do("no IPv4 network (EnableIPv4 false): IPv6 only"))
	}
	if cfg.EnableIPv6 {
		notes = append(notes, encap.Do(fmt.Sprintf("IPv6Network %v: subnets of /%d from %v to %v",
			cfg.IPv6Network, cfg.IPv6SubnetLen, netip.PrefixFrom(cfg.IPv6SubnetMin, cfg.IPv6SubnetLen),
			netip.PrefixFrom(cfg.IPv6SubnetMax, cfg.IPv6SubnetLen))))
	}
	if kubeMode {
		notes = append(notes, encap.Do("Kubernetes mode: our subnet is our node's podCIDR (podCIDRs), which must lie in the network"))
	} else {
		notes = append(notes, encap.Do("etcd mode: a lease of 24 h under the prefix's subnets/, renewed before it runs out"))
	}
	if cfg.EnableNFTables {
		notes = append(notes, encap.Do("firewall: nftables, table ip "+firewall.NFTTable+" (and ip6 "+firewall.NFTTable+
			"), for --ip-masq and --iptables-forward-rules"))
	} else {
		notes = append(notes, encap.Do("firewall: iptables chains "+firewall.MasqChain+" (--ip-masq) and "+firewall.ForwardChain+
			" (--iptables-forward-rules), in --iptables-mode's iptables"))
	}
	if kubeMode {
		notes = append(notes,
			encap.Differs("kube-outside-network-unannotated", "a podCIDR outside the network: weftd refuses before it annotates our node; flanneld annotates it first"),
			encap.Differs("kube-waits-for-podcidr", "a node without a podCIDR yet: weftd waits, not ready; flanneld exits 1 until it has one"),
			encap.Differs("kube-stale-peer-removed", "at start weftd removes the routes of nodes deleted while it was down; flanneld keeps them"))
		if cfg.EnableIPv4 && cfg.EnableIPv6 {
			notes = append(notes, encap.Differs("a peer node missing one family's annotations",
				"a peer node missing one family's annotations is taken with the other family; flanneld skips it"))
		}
	} else {
		notes = append(notes,
			encap.Differs("lease-host-id", "the lease value carries WeftHostID (a second host with the same PublicIP is stopped); flanneld ignores it"),
			encap.Differs("The lease state file", "weftd also keeps its subnet in --lease-state-file, to get it back after an outage longer than the lease"))
		if cfg.EnableIPv6 {
			notes = append(notes, encap.Differs("Choosing the IPv6 subnet",
				"a free IPv6 subnet is picked at random over the whole range, and each family's previous subnet is reused on its own; flanneld picks among the first 100 free and reuses them only as a pair"))
		}
		if !cfg.EnableIPv4 {
			notes = append(notes, encap.Differs("IPv6-only networks in etcd mode",
				"flanneld cannot share an IPv6-only network in etcd with any other host; weftd can, but flanneld's hosts on it pass no traffic"))
		}
	}
	if cfg.EnableNFTables {
		notes = append(notes, encap.Differs("nft-rules",
			"with --ip-masq, weftd's nftables rules mean what the iptables rules mean; flanneld's nftables rules do not (they never masquerade the host's own traffic into the overlay)"))
	}
	if cfg.EnableIPv6 {
		notes = append(notes, encap.Differs("Interface addresses",
			"weftd takes the interface's first global IPv6 address; flanneld may take a link-local one"))
	}
	if !tuning.Probe.Off {
		notes = append(notes, encap.Differs("Peer probes",
			"weftd probes every peer (ICMP echoes, GET /peers) and lowers the MTU of a peer's route when its path needs it; flanneld does neither (WEFT_PROBE=false turns this off)"))
	}
	notes = append(notes, encap.Differs("Firewall rules at stop",
		"at start weftd removes flanneld's own chains and nftables table once its rules are written; `weftd cleanup` removes weft's"))
	return append(notes, encap.Do("backend "+cfg.BackendType+":"))
}

// write prints the verdict: what weftd does, what differs from flanneld, and whether
// weftd runs the config.
func (v verdict) write(w io.Writer) {
	var do, diff []encap.Note
	for _, n := range v.notes {
		if n.Diff == "" {
			do = append(do, n)
		} else {
			diff = append(diff, n)
		}
	}
	if len(do) > 0 {
		fmt.Fprintln(w, "\nweftd will:")
		for _, n := range do {
			fmt.Fprintf(w, "  - %s\n", n.Text)
		}
	}
	if len(diff) > 0 {
		fmt.Fprintln(w, "\ndiffers from flanneld (docs/compatibility.md):")
		for _, n := range diff {
			fmt.Fprintf(w, "  - [%s] %s\n", n.Diff, n.Text)
		}
	}
	if v.err != nil {
		fmt.Fprintf(w, "\nrefused: %v\nweftd would stop at start with status 1 and write no subnet.env\n", v.err)
		return
	}
	fmt.Fprintln(w, "\naccepted: weftd would run this config")
}
