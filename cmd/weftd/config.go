package main

import (
	"time"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/lease/etcd"
	"github.com/weftnet/weft/lease/kube"
)

// config is how the daemon runs, as the flags and environment say.
func (o *options) config(bi buildInfo) daemon.Config {
	c := daemon.Config{
		Etcd:                  o.etcdOptions(),
		KubeEventQueueDepth:   o.eventQueueDepth,
		ContWhenCacheNotReady: o.contWhenCacheNotReady,
		SubnetFile:            o.subnetFile,
		LeaseStateFile:        o.leaseStateFile,
		RenewMargin:           time.Duration(o.renewMargin) * time.Minute,
		Ifaces:                o.ifaces,
		IfaceRegexes:          o.ifaceRegex,
		IfaceCanReach:         o.canReach,
		PublicIP:              o.publicIP,
		PublicIPv6:            o.publicIPv6,
		Site:                  o.site,
		BehindNAT:             o.behindNAT,
		IPMasq:                o.ipMasq,
		IPMasqFullyRandom:     !o.ipMasqNotRandom,
		ForwardRules:          o.iptablesForwardRules,
		IPTablesMode:          o.iptablesMode,
		Resync:                time.Duration(o.iptablesResync) * time.Second,
		BlackholeRoute:        o.blackholeRoute,
		HealthzIP:             o.healthzIP,
		HealthzPort:           o.healthzPort,
		Tuning:                o.tuning.withProbe(),
		Probe:                 o.tuning.Probe,
		Build:                 daemon.BuildInfo{Version: bi.Version, Revision: bi.Revision, GoVersion: bi.GoVersion},
	}
	if o.kubeSubnetMgr {
		// The node is --node-name or NODE_NAME, else our pod's (POD_NAMESPACE/POD_NAME),
		// as in flanneld.
		c.Kube = &kube.Options{
			NodeName:                  o.nodeName,
			PodName:                   o.podName,
			PodNamespace:              o.podNamespace,
			Kubeconfig:                o.kubeconfigFile,
			APIURL:                    o.kubeAPIURL,
			NetConfPath:               o.netConfigPath,
			AnnotationPrefix:          o.kubeAnnotation,
			SetNodeNetworkUnavailable: o.setNodeNetUnavail,
			SiteLabel:                 o.siteLabel,
		}
	}
	return c
}

// etcdOptions is how the etcd flags say to reach etcd.
func (o *options) etcdOptions() etcd.Options {
	return etcd.Options{
		Endpoints: splitList(o.etcdEndpoints),
		Prefix:    o.etcdPrefix,
		CertFile:  o.etcdCertFile,
		KeyFile:   o.etcdKeyFile,
		CAFile:    o.etcdCAFile,
		Username:  o.etcdUsername,
		Password:  o.etcdPassword,
		API:       o.etcdAPI,
	}
}
