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

// publicIP is the address peers should send to: the store's choice when it makes one
// (it wins over --public-ip, as in flanneld), else --public-ip ("" for the interface's).
func (d *daemon) publicIP(ctx context.Context, mgr lease.Manager) (string, error) {
	p, ok := mgr.(nodePublicIPer)
	if !ok {
		return d.opts.publicIP, nil
	}
	ip, err := p.NodePublicIP(ctx)
	if err != nil {
		return "", fmt.Errorf("public IP: %w", err)
	}
	if !ip.IsValid() {
		return d.opts.publicIP, nil
	}
	if d.opts.publicIP != "" && d.opts.publicIP != ip.String() {
		d.log.Info("the node's annotation overrides --public-ip", zap.String("--public-ip", d.opts.publicIP), zap.Stringer("public-ip", ip))
	}
	return ip.String(), nil
}
