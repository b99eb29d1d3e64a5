package main

import (
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/kube"
)

// kubeManager is --kube-subnet-mgr: leases from the nodes' podCIDRs.
func (d *daemon) kubeManager() (lease.Manager, error) {
	return kube.New(kube.Options{
		NodeName:                  d.opts.nodeName,
		Kubeconfig:                d.opts.kubeconfigFile,
		APIURL:                    d.opts.kubeAPIURL,
		NetConfPath:               d.opts.netConfigPath,
		AnnotationPrefix:          d.opts.kubeAnnotation,
		SetNodeNetworkUnavailable: d.opts.setNodeNetUnavail,
	}, d.log.Named("kube"))
}
