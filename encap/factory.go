package encap

import (
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// Tuning is what tunes the backends beyond the network config (weftd's environment).
// The zero value is the default.
type Tuning struct {
	UDP       UDPTuning
	WireGuard WireGuardTuning
}

// New builds the backend the network config names (in any case, as flanneld reads
// it). A plain switch, no registry: the set of backends is fixed at build time.
func New(cfg *lease.Config, ext ExternalInterface, tuning Tuning, log *zap.Logger) (Backend, error) {
	switch strings.ToLower(cfg.BackendType) {
	case "udp", "":
		return NewUDP(cfg, ext, tuning.UDP, log.Named("udp"))
	case "vxlan":
		return NewVXLAN(cfg, ext, log.Named("vxlan"))
	case "host-gw":
		return NewHostGW(cfg, ext, log.Named("host-gw"))
	case "alloc":
		return NewAlloc(cfg, ext)
	case extensionType:
		return NewExtension(cfg, ext, log.Named(extensionType))
	case wireguardType:
		return NewWireGuard(cfg, ext, tuning.WireGuard, log.Named(wireguardType))
	case "ipip":
		return nil, fmt.Errorf("%w %q: weft has no ipip backend: it needs the kernel's ipip module (tunl0), "+
			"which weft does not load or manage; use vxlan (any underlay) or host-gw (hosts on one L2 network)",
			ErrUnknownBackend, cfg.BackendType)
	case "ipsec":
		return nil, fmt.Errorf("%w %q: weft has no ipsec backend: it needs strongSwan's IKE daemon (charon) "+
			"to run beside it, which weft does not ship or drive; to encrypt traffic between hosts, "+
			"run vxlan over a WireGuard interface (wg-quick, then --iface=wg0)",
			ErrUnknownBackend, cfg.BackendType)
	}
	return nil, fmt.Errorf("%w %q: weft has udp, vxlan, host-gw, wireguard, alloc and extension", ErrUnknownBackend, cfg.BackendType)
}
