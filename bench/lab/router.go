package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNoRouter is returned by the router's methods in a lab built without one.
var ErrNoRouter = errors.New("lab has no router")

// ErrMTU is wrapped by errors about an MTU the router's links cannot have.
var ErrMTU = errors.New("bad path MTU")

// UnderlayMTU is the MTU of every underlay link of the lab.
const UnderlayMTU = 1500

// holeTable names the nftables tables SetPathMTU adds to the router.
const holeTable = "weft-lab-hole"

// holeRules drop, on the router, what would let the hosts learn of a smaller MTU or
// get past it: IPv4 fragments leaving through a LAN bridge (the router fragments
// what it forwards without DF, then loses the pieces) and the ICMP "fragmentation
// needed" it would send, or forward, for what has DF. It is what many cloud paths do.
var holeRules = fmt.Sprintf(`table bridge %[1]s {
	chain egress {
		type filter hook output priority 0;
		ip frag-off & 0x3fff != 0 counter drop
	}
}
table inet %[1]s {
	chain egress {
		type filter hook output priority 0;
		icmp type destination-unreachable icmp code frag-needed counter drop
	}
	chain transit {
		type filter hook forward priority 0;
		icmp type destination-unreachable icmp code frag-needed counter drop
	}
}
`, holeTable)

// SetPathMTU makes the router a hop whose links (the LAN bridges br1 and br2) have
// MTU mtu. Below UnderlayMTU the path between LAN1 and LAN2 is a hole: a packet
// larger than mtu is lost whether it has DF or not, and no ICMP says why; hosts'
// own links keep UnderlayMTU, so nothing on them shows the hole. SetPathMTU with
// UnderlayMTU removes the hole. Traffic within one LAN is not affected. The lab's
// Close removes what it made with the router.
func (l *Lab) SetPathMTU(ctx context.Context, mtu int) error {
	if l.router == nil {
		return ErrNoRouter
	}
	// 576 is the least every IPv4 path carries; above UnderlayMTU the hosts' links
	// would be the limit.
	if mtu < 576 || mtu > UnderlayMTU {
		return fmt.Errorf("%w: %d is not within 576..%d", ErrMTU, mtu, UnderlayMTU)
	}
	m := strconv.Itoa(mtu)
	cmds := [][]string{
		{"ip", "link", "set", "br1", "mtu", m},
		{"ip", "link", "set", "br2", "mtu", m},
	}
	if err := runAll(ctx, l.router, cmds); err != nil {
		return fmt.Errorf("path MTU %d: %w", mtu, err)
	}
	// One nft transaction: the tables are made (so that deleting them cannot fail),
	// deleted, and made again with the rules when there is a hole.
	script := fmt.Sprintf("add table bridge %[1]s\ndelete table bridge %[1]s\nadd table inet %[1]s\ndelete table inet %[1]s\n", holeTable)
	if mtu < UnderlayMTU {
		script += holeRules
	}
	cmd := l.router.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("path MTU %d: nft: %w: %s", mtu, err, out)
	}
	return nil
}
