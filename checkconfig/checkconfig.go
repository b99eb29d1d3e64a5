// Package checkconfig judges a network config as weftd would at start, without
// running it: what weftd does with it, where that differs from flanneld
// (docs/compatibility.md's names), and the error weftd would stop with. `weftd
// check-config` reads the config from where the flags say and prints the Verdict.
package checkconfig

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
)

// Verdict is what check-config says of a config: what weftd does with it, where that
// differs from flanneld, and the error weftd would stop with (nil: it runs).
type Verdict struct {
	Notes []encap.Note
	Err   error
}

// Input is how the config is checked: in Kubernetes mode or etcd mode, with the
// backends' tuning (WEFT_* variables), with or without probes, on an underlay of
// UnderlayMTU bytes.
type Input struct {
	KubeMode    bool
	Tuning      factory.Tuning
	ProbeOff    bool
	UnderlayMTU int
}

// Check checks data as weftd does at start: lease.ParseConfig, then the backend's
// checks (factory.Check).
func Check(data []byte, in Input) Verdict {
	cfg, err := lease.ParseConfig(data)
	if err != nil {
		return Verdict{Err: err, Notes: []encap.Note{encap.Differs("bad-config-exits",
			"flanneld logs a bad network config and tries again every second for ever; weftd exits with status 1, naming the field")}}
	}
	notes := networkNotes(cfg, in.KubeMode, in.ProbeOff)
	be, err := factory.Check(cfg, encap.ExternalInterface{MTU: in.UnderlayMTU}, in.Tuning)
	return Verdict{Notes: append(notes, be...), Err: err}
}

// networkNotes are what weftd does with the network config beside the backend, and the
// differences from flanneld that follow from the config and the mode.
func networkNotes(cfg *lease.Config, kubeMode, probeOff bool) []encap.Note {
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
	if !probeOff {
		notes = append(notes, encap.Differs("Peer probes",
			"weftd probes every peer (ICMP echoes, GET /peers) and lowers the MTU of a peer's route when its path needs it; flanneld does neither (WEFT_PROBE=false turns this off)"))
	}
	notes = append(notes, encap.Differs("Firewall rules at stop",
		"at start weftd removes flanneld's own chains and nftables table once its rules are written; `weftd cleanup` removes weft's"))
	return append(notes, encap.Do("backend "+cfg.BackendType+":"))
}

// Write prints the verdict: what weftd does, what differs from flanneld, and whether
// weftd runs the config.
func (v Verdict) Write(w io.Writer) {
	var do, diff []encap.Note
	for _, n := range v.Notes {
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
	if v.Err != nil {
		fmt.Fprintf(w, "\nrefused: %v\nweftd would stop at start with status 1 and write no subnet.env\n", v.Err)
		return
	}
	fmt.Fprintln(w, "\naccepted: weftd would run this config")
}
