package factory

import (
	"errors"
	"strings"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/alloc"
	"github.com/weftnet/weft/encap/extension"
	"github.com/weftnet/weft/encap/hostgw"
	"github.com/weftnet/weft/encap/udp"
	"github.com/weftnet/weft/encap/vxlan"
	"github.com/weftnet/weft/encap/wireguard"
	"github.com/weftnet/weft/lease"
)

// Check says what New would do with cfg on an external interface like ext (of which
// only the MTU is read), and how that differs from flanneld, without building the
// backend or touching the host: each backend's Check runs the checks its New runs.
// The error is New's for the same input: a config weftd refuses at start. Notes may
// come with an error: a difference that makes flanneld take what weftd refuses.
func Check(cfg *lease.Config, ext encap.ExternalInterface, tuning Tuning) ([]encap.Note, error) {
	var (
		notes []encap.Note
		err   error
	)
	switch typ := strings.ToLower(cfg.BackendType); typ {
	case "udp", "":
		notes, err = udp.Check(cfg, ext, tuning.UDP)
	case "vxlan":
		notes, err = vxlan.Check(cfg, ext)
	case "host-gw":
		notes, err = hostgw.Check(cfg)
	case "alloc":
		notes, err = alloc.Check(cfg)
	case "extension":
		notes, err = extension.Check(cfg)
	case "wireguard":
		notes, err = wireguard.Check(cfg, ext, tuning.WireGuard)
	case "ipip", "ipsec":
		notes = []encap.Note{encap.Differs("`ipip` and `ipsec` stay refused",
			"flanneld runs the "+typ+" backend; weft has none and refuses it at start")}
		err = refusal(cfg.BackendType)
	default:
		err = refusal(cfg.BackendType)
	}
	if errors.Is(err, encap.ErrUnknownOption) {
		notes = append(notes, encap.Differs("strict-options",
			"flanneld silently ignores a Backend key it does not know; weftd refuses it"))
	}
	return notes, err
}
