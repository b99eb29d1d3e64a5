package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/checkconfig"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
	"github.com/weftnet/weft/lease/kube"
)

const checkConfigUsage = `usage: weftd check-config [--file PATH | --kube-configmap NAMESPACE/NAME] [flags]
       weftd check-config --daemonset FILE | --kube-daemonset NAMESPACE/NAME

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

With --daemonset (a manifest such as kube-flannel.yml, - for standard input) or
--kube-daemonset (from the cluster; needs get on it) it reads kube-flannel's DaemonSet
instead and lists each of flanneld's arguments, its variables (FLANNELD_* included),
tolerations, node selector, affinity and resources: kept (weft's manifest and chart do
the same), carry (and where to set it in weft's chart values or weft.yml), refused
(weftd would not take it, and why) or ignored. Exit status 1 when one is refused.

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
	daemonSet    string // a kube-flannel DaemonSet's manifest (- for standard input)
	kubeDS       string // a kube-flannel DaemonSet in the cluster, NAMESPACE/NAME
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
	fs.StringVar(&co.daemonSet, "daemonset", "", "instead of a config, list the settings of kube-flannel's DaemonSet in this manifest (- for standard input) and what weft does with each")
	fs.StringVar(&co.kubeDS, "kube-daemonset", "", "the same for this DaemonSet in the cluster, NAMESPACE/NAME (kube-flannel/kube-flannel-ds)")
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
	if co.daemonSet != "" || co.kubeDS != "" {
		return co.checkDaemonSet(ctx, stdin, stdout, stderr)
	}
	src, data, err := co.read(ctx, stdin, stderr)
	fmt.Fprintf(stdout, "source: %s\n", src)
	if err != nil {
		fmt.Fprintf(stderr, "weftd check-config: %v\n", err)
		return 2
	}
	v := checkconfig.Check(data, checkconfig.Input{KubeMode: co.kubeMode(), Tuning: co.tuning.withProbe(),
		ProbeOff: co.tuning.Probe.Off, UnderlayMTU: co.underlayMTU})
	v.Write(stdout)
	if v.Err != nil {
		return 1
	}
	return 0
}

// check refuses flags that contradict each other.
func (co *checkOptions) check() error {
	switch {
	case co.file != "" && co.configMap != "":
		return errors.New("--file and --kube-configmap: give one source")
	case co.daemonSet != "" && co.kubeDS != "":
		return errors.New("--daemonset and --kube-daemonset: give one source")
	case (co.daemonSet != "" || co.kubeDS != "") && (co.file != "" || co.configMap != ""):
		return errors.New("--daemonset or --kube-daemonset reads the DaemonSet instead of a config: leave out --file and --kube-configmap")
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

// checkDaemonSet lists kube-flannel's DaemonSet's settings (--daemonset, or
// --kube-daemonset) and what weft does with each: exit 1 when weftd refuses one.
func (co *checkOptions) checkDaemonSet(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	var ds *appsv1.DaemonSet
	var err error
	switch {
	case co.kubeDS != "":
		ds, err = co.fetchDaemonSet(ctx)
	case co.daemonSet == "-":
		ds, err = checkconfig.ReadDaemonSet(stdin)
	default:
		var f *os.File
		if f, err = os.Open(co.daemonSet); err == nil {
			ds, err = checkconfig.ReadDaemonSet(f)
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "weftd check-config: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "source: DaemonSet %s/%s\n", ds.Namespace, ds.Name)
	settings, err := checkconfig.FromDaemonSet(ds, weftdTakes)
	if err != nil {
		fmt.Fprintf(stderr, "weftd check-config: %v\n", err)
		return 2
	}
	checkconfig.WriteSettings(stdout, settings)
	for _, s := range settings {
		if s.Fate == checkconfig.Refused {
			return 1
		}
	}
	return 0
}

// fetchDaemonSet reads --kube-daemonset from the cluster.
func (co *checkOptions) fetchDaemonSet(ctx context.Context) (*appsv1.DaemonSet, error) {
	namespace, name, ok := strings.Cut(co.kubeDS, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--kube-daemonset=%q: want NAMESPACE/NAME", co.kubeDS)
	}
	rc, err := kube.ClientConfig(co.kubeAPIURL, co.kubeconfigFile)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get DaemonSet %s: %w", co.kubeDS, err)
	}
	return ds, nil
}

// weftdTakes says whether weftd takes flanneld's argument a (its own flag parser, as a
// DaemonSet's pod gives it: POD_NAME and POD_NAMESPACE set).
func weftdTakes(a string) error {
	env := func(k string) string {
		if k == "POD_NAME" || k == "POD_NAMESPACE" {
			return "set"
		}
		return ""
	}
	_, err := parseFlags([]string{a}, env, io.Discard)
	return err
}
