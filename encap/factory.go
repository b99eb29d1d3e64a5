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
	UDP UDPTuning
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
	}
	return nil, fmt.Errorf("%w %q: weft has udp, vxlan, host-gw and alloc", ErrUnknownBackend, cfg.BackendType)
}
