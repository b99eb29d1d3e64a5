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

	"github.com/weftnet/weft/checkconfig"
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
