package main

import (
	"context"
	"fmt"
	"net/netip"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/kube"
)

// kubeManager is --kube-subnet-mgr: leases from the nodes' podCIDRs. The node is
// --node-name or NODE_NAME, else our pod's (POD_NAMESPACE/POD_NAME), as in flanneld.
func (d *daemon) kubeManager() (lease.Manager, error) {
	return kube.New(kube.Options{
		NodeName:                  d.opts.nodeName,
		PodName:                   d.opts.podName,
		PodNamespace:              d.opts.podNamespace,
		Kubeconfig:                d.opts.kubeconfigFile,
		APIURL:                    d.opts.kubeAPIURL,
		NetConfPath:               d.opts.netConfigPath,
		AnnotationPrefix:          d.opts.kubeAnnotation,
		SetNodeNetworkUnavailable: d.opts.setNodeNetUnavail,
	}, d.log.Named("kube"))
}

// nodePublicIPer is implemented by managers whose store can set our public IP
// (Kubernetes: the node's node-public-ip annotation, which flanneld honours too).
type nodePublicIPer interface {
	NodePublicIP(ctx context.Context) (netip.Addr, error)
}

// nodePublicIPv6er is nodePublicIPer for the IPv6 address (node-public-ipv6).
type nodePublicIPv6er interface {
	NodePublicIPv6(ctx context.Context) (netip.Addr, error)
}

// publicIPs are the addresses peers should send to, IPv4 and IPv6 (the latter only
// on a network with IPv6): the store's choice when it makes one (it wins over
// --public-ip and --public-ipv6, as in flanneld), else the flag ("" for the
// interface's).
func (d *daemon) publicIPs(ctx context.Context, mgr lease.Manager, cfg *lease.Config) (string, string, error) {
	v4, v6 := d.opts.publicIP, d.opts.publicIPv6
	if p, ok := mgr.(nodePublicIPer); ok && cfg.EnableIPv4 {
		ip, err := p.NodePublicIP(ctx)
		if err != nil {
			return "", "", fmt.Errorf("public IP: %w", err)
		}
		v4 = d.overridden("--public-ip", v4, ip)
	}
	if p, ok := mgr.(nodePublicIPv6er); ok && cfg.EnableIPv6 {
		ip, err := p.NodePublicIPv6(ctx)
		if err != nil {
			return "", "", fmt.Errorf("public IPv6: %w", err)
		}
		v6 = d.overridden("--public-ipv6", v6, ip)
	}
	return v4, v6, nil
}

// overridden is the store's address ip when valid, else flagValue.
func (d *daemon) overridden(flag, flagValue string, ip netip.Addr) string {
	if !ip.IsValid() {
		return flagValue
	}
	if flagValue != "" && flagValue != ip.String() {
		d.log.Info("the node's annotation overrides "+flag, zap.String(flag, flagValue), zap.Stringer("address", ip))
	}
	return ip.String()
}
