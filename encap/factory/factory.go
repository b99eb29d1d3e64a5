// Package factory builds the backend a network config names (factory.go) and gives
// weftd what it needs of every backend without importing them (names.go): their
// names, the devices each makes (for cleanup) and the descriptions of their metrics. It is the one
// package beside the backends' own tests that imports every backend: adding a backend
// is a new package under encap/ and one line in New.
package factory

import (
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/alloc"
	"github.com/weftnet/weft/encap/extension"
	"github.com/weftnet/weft/encap/hostgw"
	"github.com/weftnet/weft/encap/udp"
	"github.com/weftnet/weft/encap/vxlan"
	"github.com/weftnet/weft/encap/wireguard"
	"github.com/weftnet/weft/lease"
)

// Tuning is what tunes the backends beyond the network config (weftd's environment).
// The zero value is the default.
type Tuning struct {
	UDP       udp.Tuning
	WireGuard wireguard.Tuning
}

// New builds the backend the network config names (in any case, as flanneld reads
// it). A plain switch, no registry: the set of backends is fixed at build time.
func New(cfg *lease.Config, ext encap.ExternalInterface, tuning Tuning, log *zap.Logger) (encap.Backend, error) {
	switch strings.ToLower(cfg.BackendType) {
	case "udp", "":
		return udp.New(cfg, ext, tuning.UDP, log.Named("udp"))
	case "vxlan":
		return vxlan.New(cfg, ext, log.Named("vxlan"))
	case "host-gw":
		return hostgw.New(cfg, ext, log.Named("host-gw"))
	case "alloc":
		return alloc.New(cfg, ext)
	case "extension":
		return extension.New(cfg, ext, log.Named("extension"))
	case "wireguard":
		return wireguard.New(cfg, ext, tuning.WireGuard, log.Named("wireguard"))
	}
	return nil, refusal(cfg.BackendType)
}

// refusal is New's error for a type it has no backend for: ipip and ipsec with why and
// what to use instead, any other with the names of the backends weft has.
func refusal(typ string) error {
	switch strings.ToLower(typ) {
	case "ipip":
		return fmt.Errorf("%w %q: weft has no ipip backend: it needs the kernel's ipip module (tunl0), "+
			"which weft does not load or manage; use vxlan (any underlay) or host-gw (hosts on one L2 network)",
			encap.ErrUnknownBackend, typ)
	case "ipsec":
		return fmt.Errorf("%w %q: weft has no ipsec backend: it needs strongSwan's IKE daemon (charon) "+
			"to run beside it, which weft does not ship or drive; to encrypt traffic between hosts, "+
			"run vxlan over a WireGuard interface (wg-quick, then --iface=wg0)",
			encap.ErrUnknownBackend, typ)
	}
	return fmt.Errorf("%w %q: weft has udp, vxlan, host-gw, wireguard, alloc and extension", encap.ErrUnknownBackend, typ)
}
