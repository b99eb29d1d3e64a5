package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/weftnet/weft/internal/ipconv"
)

// ErrBadRoute is wrapped by errors about subnets or addresses the table cannot hold.
var ErrBadRoute = errors.New("bad route")

// maxIndexBits bounds the table's index: 2^20 subnets per network.
const maxIndexBits = 20

// Route says that Subnet is reached through the host at PublicIP. Either may be
// IPv4 or IPv6: an IPv6 Subnet needs Table.EnableIPv6, an IPv6 PublicIP is sent to
// over the IPv6 underlay.
type Route struct {
	Subnet   netip.Prefix
	PublicIP netip.Addr
}

// Peer is a remote host holding one subnet, as the data path sees it.
type Peer struct {
	Subnet   netip.Prefix
	PublicIP netip.Addr
	ip       uint32   // PublicIP, when IPv4
	ip6      [16]byte // PublicIP, when IPv6
	under6   bool     // PublicIP is IPv6: sent over the IPv6 underlay
}

// Snapshot is an immutable view of the table. Lookups on it never block or allocate.
type Snapshot struct {
	network   uint32
	netMask   uint32 // mask of the whole network
	subMask   uint32 // mask of one subnet
	shift     uint
	local     uint32 // our subnet's first address
	hasLocal  bool
	bySubnet  []*Peer        // index (dst-network)>>shift
	byIP      map[uint32]int // public address -> number of subnets it holds
	byIP6     map[[16]byte]int
	routes    int
	localPref netip.Prefix
	v6        *table6 // the IPv6 side, nil without an IPv6 network
	no4       bool    // no IPv4 network: an IPv6-only table
}

// Table maps overlay subnets to the public addresses of their hosts. Readers load a
// Snapshot; writers build the next one copy-on-write and swap it in.
type Table struct {
	mu   sync.Mutex // serialises writers
	snap atomic.Pointer[Snapshot]
}

// NewTable makes an empty table for network, whose leases are all /subnetLen. A zero
// network makes a table without an IPv4 side, for an IPv6-only network: no IPv4
// address is in it, and EnableIPv6 gives it its only side.
func NewTable(network netip.Prefix, subnetLen int) (*Table, error) {
	if network == (netip.Prefix{}) {
		// A mask of 0 against a network of 1 matches no address.
		t := &Table{}
		t.snap.Store(&Snapshot{network: 1, no4: true, byIP: map[uint32]int{}, byIP6: map[[16]byte]int{}})
		return t, nil
	}
	if !network.Addr().Is4() {
		return nil, fmt.Errorf("%w: network %v is not IPv4", ErrBadRoute, network)
	}
	bits := subnetLen - network.Bits()
	if subnetLen > 32 || bits < 0 || bits > maxIndexBits {
		return nil, fmt.Errorf("%w: subnet length %d in network %v (at most 2^%d subnets)",
			ErrBadRoute, subnetLen, network, maxIndexBits)
	}
	network = network.Masked()
	s := &Snapshot{
		network:  ipconv.U32(network.Addr()),
		netMask:  mask(network.Bits()),
		subMask:  mask(subnetLen),
		shift:    uint(32 - subnetLen),
		bySubnet: make([]*Peer, 1<<bits),
		byIP:     map[uint32]int{},
		byIP6:    map[[16]byte]int{},
	}
	t := &Table{}
	t.snap.Store(s)
	return t, nil
}

func mask(bits int) uint32 {
	if bits == 0 {
		return 0
	}
	return ^uint32(0) << (32 - bits)
}

// Load returns the current snapshot.
func (t *Table) Load() *Snapshot { return t.snap.Load() }

func (s *Snapshot) clone() *Snapshot {
	n := *s
	n.bySubnet = append([]*Peer(nil), s.bySubnet...)
	n.byIP = make(map[uint32]int, len(s.byIP))
	for k, v := range s.byIP {
		n.byIP[k] = v
	}
	n.byIP6 = make(map[[16]byte]int, len(s.byIP6))
	for k, v := range s.byIP6 {
		n.byIP6[k] = v
	}
	if s.v6 != nil {
		n.v6 = s.v6.clone()
	}
	return &n
}

// index returns the slot of a subnet, or -1 if it is not one of the network's
// subnets.
func (s *Snapshot) index(p netip.Prefix) (int, error) {
	if s.no4 {
		return -1, fmt.Errorf("%w: subnet %v: the table has no IPv4 network", ErrBadRoute, p)
	}
	if !p.Addr().Is4() || p.Bits() != 32-int(s.shift) {
		return -1, fmt.Errorf("%w: subnet %v is not a /%d", ErrBadRoute, p, 32-s.shift)
	}
	a := ipconv.U32(p.Addr())
	if a&s.netMask != s.network || a&^s.subMask != 0 {
		return -1, fmt.Errorf("%w: subnet %v is not a subnet of the network", ErrBadRoute, p)
	}
	return int((a - s.network) >> s.shift), nil
}

// slots returns the slot array and index of subnet p, of either family.
func (s *Snapshot) slots(p netip.Prefix) ([]*Peer, int, error) {
	if p.Addr().Is6() {
		if s.v6 == nil {
			return nil, -1, fmt.Errorf("%w: subnet %v: the table has no IPv6 network", ErrBadRoute, p)
		}
		i, err := s.v6.index(p)
		return s.v6.bySubnet, i, err
	}
	i, err := s.index(p)
	return s.bySubnet, i, err
}

// SetLocal sets our own subnet (IPv4, or IPv6 once EnableIPv6 gave the table an IPv6
// side): ingress must be addressed to it, egress to it is dropped, and ICMP errors
// come from its first address.
func (t *Table) SetLocal(subnet netip.Prefix) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.snap.Load()
	if subnet.Addr().Is6() {
		if _, _, err := s.slots(subnet); err != nil {
			return err
		}
		n := s.clone()
		n.v6.local = subnet
		n.v6.locHi, n.v6.locLo = halves(subnet.Addr())
		t.snap.Store(n)
		return nil
	}
	if _, err := s.index(subnet); err != nil {
		return err
	}
	n := s.clone()
	n.local, n.hasLocal, n.localPref = ipconv.U32(subnet.Addr()), true, subnet
	t.snap.Store(n)
	return nil
}

// Apply adds (or replaces) set and removes remove in one new snapshot. Our own subnet
// is never added. It applies what it can and returns the errors of the rest.
func (t *Table) Apply(set []Route, remove []netip.Prefix) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.snap.Load().clone()
	var errs []error
	for _, p := range remove {
		slots, i, err := n.slots(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n.drop(slots, i)
	}
	for _, r := range set {
		slots, i, err := n.slots(r.Subnet)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pub := r.PublicIP
		if pub.Is4In6() {
			pub = pub.Unmap()
		}
		if !pub.Is4() && (pub.Zone() != "" || !pub.IsGlobalUnicast()) {
			errs = append(errs, fmt.Errorf("%w: subnet %v: public IP %v is not a unicast address", ErrBadRoute, r.Subnet, r.PublicIP))
			continue
		}
		if r.Subnet == n.localPref && n.hasLocal || n.v6 != nil && r.Subnet == n.v6.local {
			continue
		}
		n.drop(slots, i)
		p := &Peer{Subnet: r.Subnet, PublicIP: pub}
		if pub.Is4() {
			p.ip = ipconv.U32(pub)
			n.byIP[p.ip]++
		} else {
			p.ip6, p.under6 = pub.As16(), true
			n.byIP6[p.ip6]++
		}
		slots[i] = p
		n.routes++
	}
	t.snap.Store(n)
	return errors.Join(errs...)
}

func (s *Snapshot) drop(slots []*Peer, i int) {
	old := slots[i]
	if old == nil {
		return
	}
	slots[i] = nil
	s.routes--
	if old.under6 {
		if s.byIP6[old.ip6]--; s.byIP6[old.ip6] <= 0 {
			delete(s.byIP6, old.ip6)
		}
		return
	}
	if s.byIP[old.ip]--; s.byIP[old.ip] <= 0 {
		delete(s.byIP, old.ip)
	}
}

// Len is the number of peers.
func (s *Snapshot) Len() int { return s.routes }

// Routes lists the peers (for diagnostics; allocates).
func (s *Snapshot) Routes() []Route {
	var rs []Route
	all := s.bySubnet
	if s.v6 != nil {
		all = append(all[:len(all):len(all)], s.v6.bySubnet...)
	}
	for _, p := range all {
		if p != nil {
			rs = append(rs, Route{Subnet: p.Subnet, PublicIP: p.PublicIP})
		}
	}
	return rs
}

// Lookup returns the peer whose subnet holds dst (a big-endian IPv4 address), or nil.
func (s *Snapshot) Lookup(dst uint32) *Peer {
	if dst&s.netMask != s.network {
		return nil
	}
	i := (dst - s.network) >> s.shift
	if i >= uint32(len(s.bySubnet)) {
		return nil
	}
	return s.bySubnet[i]
}

// HoldsLease reports whether the public address ip (big-endian) holds a lease.
func (s *Snapshot) HoldsLease(ip uint32) bool { return s.byIP[ip] > 0 }

// InNetwork reports whether a holds in the overlay network.
func (s *Snapshot) InNetwork(a uint32) bool { return a&s.netMask == s.network }

// IsLocal reports whether a lies in our own subnet.
func (s *Snapshot) IsLocal(a uint32) bool { return s.hasLocal && a&s.subMask == s.local }
