// Command weft-cni is weft's flannel CNI plugin. Installed as "flannel" (the image
// carries it as /flannel), it serves kube-flannel's network configs unchanged at every
// CNI spec version from 0.1.0 to 1.0.0: it reads the subnet.env that weftd or flanneld
// writes, builds a config for a delegate plugin (bridge with host-local IPAM unless the
// config says otherwise), keeps that config for DEL and CHECK, and calls the delegate.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

// specVersions are the CNI spec versions weft-cni speaks: those kube-flannel's
// configs and the usual delegates (bridge, host-local) use.
var specVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"}

func main() {
	p := &plugin{}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: p.add, Del: p.del, Check: p.check},
		version.PluginSupports(specVersions...), "weft-cni: weft's flannel CNI plugin")
}
