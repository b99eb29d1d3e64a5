package daemon

import (
	"context"
	"fmt"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// leaseAttrs is what our lease publishes: the public addresses of ext and the
// backend's data, for IPv6 too when the backend has some (vxlan's flannel-v6.<VNI>).
func leaseAttrs(ctx context.Context, be encap.Backend, ext encap.ExternalInterface) (lease.Attrs, error) {
	data, err := be.BackendData(ctx)
	if err != nil {
		return lease.Attrs{}, fmt.Errorf("%s backend: %w", be.Type(), err)
	}
	a := lease.Attrs{PublicIP: ext.PublicIP, PublicIPv6: ext.PublicIPv6, BackendType: be.Type(), BackendData: data}
	if la, ok := be.(encap.LeaseAddressChooser); ok {
		// flanneld's extension backend publishes the interface's addresses.
		a.PublicIP, a.PublicIPv6 = la.LeaseAddrs()
	}
	if v6, ok := be.(encap.IPv6DataPublisher); ok {
		if a.BackendV6Data, err = v6.BackendV6Data(ctx); err != nil {
			return lease.Attrs{}, fmt.Errorf("%s backend (IPv6): %w", be.Type(), err)
		}
	}
	return a, nil
}
