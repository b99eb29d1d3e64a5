package daemon

import (
	"time"

	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/lease/etcd"
	"github.com/weftnet/weft/lease/kube"
	"github.com/weftnet/weft/paths"
)

// Config is how a node runs: what weftd's flags and environment say, parsed and
// checked by cmd/weftd. Nothing in this package reads flags or the environment; error
// messages name the flag a field comes from.
type Config struct {
	// Etcd is where leases live (--etcd-*), unless Kube is set.
	Etcd etcd.Options
	// Kube, when set, takes leases from the nodes' podCIDRs (--kube-subnet-mgr).
	Kube *kube.Options
	// KubeEventQueueDepth is EVENT_QUEUE_DEPTH, flanneld's buffer of node events:
	// logged only, weftd's node watch has no such queue.
	KubeEventQueueDepth int
	// ContWhenCacheNotReady keeps waiting for the node cache instead of failing after
	// ten minutes, as flanneld (CONT_WHEN_CACHE_NOT_READY=true).
	ContWhenCacheNotReady bool

	SubnetFile     string        // --subnet-file
	LeaseStateFile string        // --lease-state-file
	RenewMargin    time.Duration // --subnet-lease-renew-margin

	// The external interface: --iface names or addresses tried in order, then the
	// --iface-regex expressions, then the interface of the route to --iface-can-reach.
	Ifaces        []string
	IfaceRegexes  []string
	IfaceCanReach string
	PublicIP      string // --public-ip ("": the interface's)
	PublicIPv6    string // --public-ipv6 ("": the interface's)
	// Site is our site (--site; in Kubernetes mode the node label Kube.SiteLabel
	// names, when this is empty). It says which hosts share a network, never NAT.
	// BehindNAT (--behind-nat) says our PublicIP is not to be dialed from outside
	// our site.
	Site      string
	BehindNAT bool

	IPMasq            bool          // --ip-masq
	IPMasqFullyRandom bool          // MASQUERADE --random-fully (not --ip-masq-fully-random-disable)
	ForwardRules      bool          // --iptables-forward-rules
	IPTablesMode      string        // --iptables-mode: auto, legacy, nft or plain
	Resync            time.Duration // --iptables-resync: checks of the rules and blackhole routes
	BlackholeRoute    bool          // --ip-blackhole-route

	HealthzIP   string // --healthz-ip
	HealthzPort int    // --healthz-port (0: no health server)

	Tuning factory.Tuning // the WEFT_* variables
	Probe  Probe          // WEFT_PROBE*
	Build  BuildInfo      // for weft_build_info
}

// Probe is how the peers are probed (package paths).
type Probe struct {
	Off bool // no probing at all
	paths.Config
}

// BuildInfo names the weftd that runs (weft_build_info's labels).
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// CleanupConfig is what Cleanup needs: `weftd cleanup`'s flags.
type CleanupConfig struct {
	SubnetFile string // names our subnets and the network
	// ReleaseLease also deletes our lease, named by SubnetFile, from Etcd.
	ReleaseLease bool
	Etcd         etcd.Options
	// FirewallOnly hands the data path to flanneld (a node going back to it): weft's
	// firewall rules and the route MTUs path repair set go, and on a Kubernetes node
	// weft's annotations and condition; devices, routes and subnet.env stay.
	FirewallOnly bool
	// Kube, when set, finds our node: weft's annotations and WeftPeersReachable
	// condition are removed from it.
	Kube *kube.Options
	// Uninstall removes the lease too (from Etcd, as ReleaseLease; in Kubernetes the
	// node's lease annotations), LeaseStateFile (and its directory, when empty) and
	// Files (the CNI config and plugin a DaemonSet installed): nothing of weft stays.
	Uninstall      bool
	LeaseStateFile string
	Files          []string
}
