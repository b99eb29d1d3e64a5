package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/kube"
)

// flagHelp is returned when -h or --help was asked for (usage is already printed).
var flagHelp = flag.ErrHelp

// options are weftd's settings: flanneld's flags with flanneld's defaults, plus weft's own.
type options struct {
	etcdEndpoints string
	etcdPrefix    string
	etcdCertFile  string
	etcdKeyFile   string
	etcdCAFile    string
	etcdUsername  string
	etcdPassword  string
	etcdAPI       string // weft: v3 | v2

	ifaces      listFlag
	ifaceRegex  listFlag
	canReach    string
	publicIP    string
	publicIPv6  string
	site        string // weft
	behindNAT   bool   // weft
	siteLabel   string // weft, Kubernetes mode
	subnetFile  string
	renewMargin int // minutes
	ipMasq      bool
	// --ip-masq-fully-random-disable: MASQUERADE without --random-fully
	ipMasqNotRandom bool
	healthzIP       string
	healthzPort     int
	version         bool
	// verbosity is klog's -v as flanneld takes it; logLevel maps it onto zap.
	verbosity int
	// vmodule and logBacktraceAt are klog's flags, which flanneld accepts: checked
	// with klog's syntax, with no effect on weftd's log (docs/operations.md, Logs).
	vmodule        vmoduleFlag
	logBacktraceAt backtraceFlag
	// blackholeRoute is --ip-blackhole-route: a blackhole route for our subnet(s).
	blackholeRoute bool

	iptablesResync       int
	iptablesForwardRules bool
	// iptablesMode is --iptables-mode (weft): auto (DetectIPTablesMode), legacy,
	// nft or plain.
	iptablesMode string

	kubeSubnetMgr     bool
	kubeAPIURL        string
	kubeconfigFile    string
	kubeAnnotation    string
	netConfigPath     string
	setNodeNetUnavail bool
	nodeName          string
	// podName, podNamespace: our pod (POD_NAME, POD_NAMESPACE, as kube-flannel.yml
	// sets them); without a node name the node is the pod's spec.nodeName.
	podName      string
	podNamespace string

	// eventQueueDepth is EVENT_QUEUE_DEPTH (kube mode), flanneld's buffer of node
	// events: checked as flanneld checks it; weftd's node watch has no such queue.
	eventQueueDepth int
	// contWhenCacheNotReady is CONT_WHEN_CACHE_NOT_READY=true (kube mode): keep
	// waiting for the node cache instead of exiting after kubeCacheSyncTimeout.
	contWhenCacheNotReady bool

	leaseStateFile string // weft

	tuning settings // weft: the WEFT_* variables (knobs.go)
}

// listFlag is a repeatable flag; each use adds its whole value, commas included, as
// flanneld's --iface and --iface-regex do (a regex such as ^eth[0-9]{1,2}$ holds one).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func newFlagSet(o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("weftd", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.etcdEndpoints, "etcd-endpoints", "http://127.0.0.1:4001,http://127.0.0.1:2379", "comma-separated etcd endpoints")
	fs.StringVar(&o.etcdPrefix, "etcd-prefix", lease.DefaultPrefix, "etcd prefix")
	fs.StringVar(&o.etcdCertFile, "etcd-certfile", "", "TLS client certificate for etcd")
	fs.StringVar(&o.etcdKeyFile, "etcd-keyfile", "", "TLS client key for etcd")
	fs.StringVar(&o.etcdCAFile, "etcd-cafile", "", "TLS CA for etcd")
	fs.StringVar(&o.etcdUsername, "etcd-username", "", "etcd user name")
	fs.StringVar(&o.etcdPassword, "etcd-password", "", "etcd password")
	fs.StringVar(&o.etcdAPI, "etcd-api", "v3", "etcd API: v3 or v2 (weft)")
	fs.Var(&o.ifaces, "iface", "interface (name or IP) for inter-host traffic; repeatable, the first found wins")
	fs.Var(&o.ifaceRegex, "iface-regex", "regular expression matching an interface's IP or name; repeatable, tried after every --iface")
	fs.StringVar(&o.canReach, "iface-can-reach", "", "use the interface (and source address) of the route to this IP, IPv4 or IPv6, as ip route get does; tried after --iface and --iface-regex")
	fs.StringVar(&o.publicIP, "public-ip", "", "IP peers reach this host at (default: the interface's)")
	fs.StringVar(&o.publicIPv6, "public-ipv6", "", "IPv6 address peers reach this host at on a dual-stack or IPv6-only network (default: the interface's)")
	fs.StringVar(&o.site, "site", "", "this host's site (weft; wireguard): hosts of one site reach each other on their interface addresses; other peers are dialed directly, then through NAT or a relay on evidence (see docs/sites.md)")
	fs.BoolVar(&o.behindNAT, "behind-nat", false, "with a site (weft; wireguard): hosts outside the site never dial this host's public IP (known dead from outside): they wait for it to dial them, punch or relay")
	fs.StringVar(&o.siteLabel, "site-label", kube.DefaultSiteLabel, "Kubernetes mode: the node label read as the site when --site is not given; empty for none (weft)")
	fs.StringVar(&o.subnetFile, "subnet-file", "/run/flannel/subnet.env", "file the subnet lease is written to")
	fs.IntVar(&o.renewMargin, "subnet-lease-renew-margin", 60, "minutes before expiry at which the lease is renewed")
	fs.BoolVar(&o.ipMasq, "ip-masq", false, "masquerade traffic leaving the overlay (iptables nat chain "+firewall.MasqChain+", or nftables table "+firewall.NFTTable+")")
	fs.BoolVar(&o.ipMasqNotRandom, "ip-masq-fully-random-disable", false, "masquerade without --random-fully")
	fs.StringVar(&o.healthzIP, "healthz-ip", "0.0.0.0", "address the health endpoint listens on")
	fs.IntVar(&o.healthzPort, "healthz-port", 0, "port of the health endpoint (0: off)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Var((*klogLevel)(&o.verbosity), "v", "log verbosity, as klog's: 0 info and above, 1 and above debug too (see docs/operations.md, Logs)")
	fs.Var(&o.vmodule, "vmodule", "klog's comma-separated list of pattern=N settings for file-filtered logging; accepted for flanneld's sake, no effect in weftd")
	fs.Var(&o.logBacktraceAt, "log_backtrace_at", "klog's file:N at which to emit a stack trace; accepted for flanneld's sake, no effect in weftd")
	fs.BoolVar(&o.blackholeRoute, "ip-blackhole-route", false, "add a blackhole route for our subnet, so traffic to its unassigned addresses is dropped (kept up every --iptables-resync seconds)")
	fs.IntVar(&o.iptablesResync, "iptables-resync", 5, "seconds between checks of weftd's forward and masquerade rules (iptables or nftables)")
	fs.BoolVar(&o.iptablesForwardRules, "iptables-forward-rules", true, "accept forwarded overlay traffic in the FORWARD chain")
	fs.StringVar(&o.iptablesMode, "iptables-mode", "auto", "iptables backend for weft's rules: auto (the one the host's rules are in), legacy (iptables-legacy), nft (iptables-nft) or plain (plain iptables); unused with EnableNFTables (weft)")
	fs.BoolVar(&o.kubeSubnetMgr, "kube-subnet-mgr", false, "take the subnet from the Kubernetes node's podCIDR instead of etcd")
	fs.StringVar(&o.kubeAPIURL, "kube-api-url", "", "Kubernetes API server URL (kube mode)")
	fs.StringVar(&o.kubeconfigFile, "kubeconfig-file", "", "kubeconfig file (kube mode)")
	fs.StringVar(&o.kubeAnnotation, "kube-annotation-prefix", "flannel.alpha.coreos.com", "node annotation prefix (kube mode)")
	fs.StringVar(&o.netConfigPath, "net-config-path", "/etc/kube-flannel/net-conf.json", "network config file (kube mode)")
	fs.BoolVar(&o.setNodeNetUnavail, "set-node-network-unavailable", true, "clear the node's NetworkUnavailable condition when ready (kube mode)")
	fs.StringVar(&o.nodeName, "node-name", "", "Kubernetes node name (default: $NODE_NAME)")
	fs.StringVar(&o.leaseStateFile, "lease-state-file", "/var/lib/weft/lease.json", "durable record of our subnet, kept across reboots (weft)")
	return fs
}

// envName is the variable flanneld reads a flag from: FLANNELD_<FLAG>, upper case,
// dashes as underscores (FLANNELD_IP_MASQ, FLANNELD_V, FLANNELD_LOG_BACKTRACE_AT).
func envName(flag string) string {
	return "FLANNELD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// fromEnv tells whether a flag is taken from its FLANNELD_ variable. Every flag is
// but --version: flanneld acts on --version before it reads the environment, so
// FLANNELD_VERSION=true changes nothing there, and weftd does the same.
func fromEnv(flag string) bool { return flag != "version" }

// parseFlags parses args; a flag not given on the command line is taken from
// FLANNELD_<FLAG> (envName) when that is set.
func parseFlags(args []string, env func(string) string, out io.Writer) (*options, error) {
	o := &options{}
	fs := newFlagSet(o, out)
	fs.Usage = func() { printUsage(fs.Output(), fs) }
	if err := parseWith(fs, args, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, flagHelp
		}
		return nil, err
	}
	var err error
	if o.nodeName == "" {
		o.nodeName = env("NODE_NAME")
	}
	o.podName, o.podNamespace = env("POD_NAME"), env("POD_NAMESPACE")
	o.contWhenCacheNotReady = env("CONT_WHEN_CACHE_NOT_READY") == "true" // flanneld's exact test
	if o.eventQueueDepth, err = eventQueueDepth(o.kubeSubnetMgr, env("EVENT_QUEUE_DEPTH")); err != nil {
		return nil, err
	}
	if o.tuning, err = parseKnobs(env); err != nil {
		return nil, err
	}
	return o, o.check()
}

// defaultEventQueueDepth is flanneld's depth of its node event queue.
const defaultEventQueueDepth = 5000

// eventQueueDepth reads EVENT_QUEUE_DEPTH as flanneld does: in kube mode only, an
// integer (else an error), the default when unset or not positive. weftd has no such
// queue (its node watch keeps the set of changed nodes, which cannot overflow), so
// the value is only checked and logged.
func eventQueueDepth(kubeMode bool, s string) (int, error) {
	if !kubeMode || s == "" {
		return defaultEventQueueDepth, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("environment EVENT_QUEUE_DEPTH=%q: %w", s, err)
	}
	if n <= 0 {
		return defaultEventQueueDepth, nil
	}
	return n, nil
}

// check rejects values weft cannot honour, so nothing is silently ignored.
func (o *options) check() error {
	switch {
	case o.etcdAPI != "v3" && o.etcdAPI != "v2":
		return fmt.Errorf("--etcd-api=%q: must be v3 or v2", o.etcdAPI)
	case o.publicIPv6 != "" && !isIPv6(o.publicIPv6):
		return fmt.Errorf("--public-ipv6=%q: not an IPv6 address", o.publicIPv6)
	case o.renewMargin <= 0 || time.Duration(o.renewMargin)*time.Minute >= 24*time.Hour:
		return fmt.Errorf("--subnet-lease-renew-margin=%d: must be between 1 and 1439 minutes", o.renewMargin)
	case o.healthzPort < 0 || o.healthzPort > 65535:
		return fmt.Errorf("--healthz-port=%d: not a port", o.healthzPort)
	case o.iptablesMode != "auto" && !validIPTablesMode(o.iptablesMode):
		return fmt.Errorf("--iptables-mode=%q: must be auto, legacy, nft or plain", o.iptablesMode)
	case o.iptablesResync <= 0:
		return fmt.Errorf("--iptables-resync=%d: must be positive", o.iptablesResync)
	case o.kubeSubnetMgr && o.nodeName == "" && (o.podName == "" || o.podNamespace == ""):
		return errors.New("--kube-subnet-mgr needs the node: set POD_NAME and POD_NAMESPACE (as kube-flannel.yml does), NODE_NAME or --node-name")
	}
	return nil
}

func validIPTablesMode(s string) bool {
	_, err := firewall.ParseIPTablesMode(s)
	return err == nil
}

// isIPv6 reports whether s is a plain IPv6 address (not IPv4-mapped, no zone).
func isIPv6(s string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && ip.Is6() && !ip.Is4In6() && ip.Zone() == ""
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseWith parses args into fs, then fills each flag not given on the command line
// from its FLANNELD_ variable (envName), as flanneld does.
func parseWith(fs *flag.FlagSet, args []string, env func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v := env(name)
		if given[f.Name] || !fromEnv(f.Name) || v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}
