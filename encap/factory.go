package encap

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// New builds the backend the network config names. A plain switch, no registry: the
// set of backends is fixed at build time.
func New(cfg *lease.Config, ext ExternalInterface, log *zap.Logger) (Backend, error) {
	switch cfg.BackendType {
	case "udp", "":
		return NewUDP(cfg, ext, log.Named("udp"))
	case "vxlan":
		return NewVXLAN(cfg, ext, log.Named("vxlan"))
	case "host-gw":
		return NewHostGW(cfg, ext, log.Named("host-gw"))
	case "alloc":
		return NewAlloc(ext), nil
	}
	return nil, fmt.Errorf("%w %q: weft has udp, vxlan, host-gw and alloc", ErrUnknownBackend, cfg.BackendType)
}
