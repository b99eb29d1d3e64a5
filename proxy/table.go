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

// Route says that Subnet is reached through the host at PublicIP.
type Route struct {
	Subnet   netip.Prefix
	PublicIP netip.Addr
}

// Peer is a remote host holding one subnet, as the data path sees it.
type Peer struct {
	Subnet   netip.Prefix
	PublicIP netip.Addr
	ip       uint32 // PublicIP
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
	routes    int
	localPref netip.Prefix
}

// Table maps overlay subnets to the public addresses of their hosts. Readers load a
// Snapshot; writers build the next one copy-on-write and swap it in.
type Table struct {
	mu   sync.Mutex // serialises writers
	snap atomic.Pointer[Snapshot]
}

// NewTable makes an empty table for network, whose leases are all /subnetLen.
func NewTable(network netip.Prefix, subnetLen int) (*Table, error) {
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
	return &n
}

// index returns the slot of a subnet, or -1 if it is not one of the network's
// subnets.
func (s *Snapshot) index(p netip.Prefix) (int, error) {
	if !p.Addr().Is4() || p.Bits() != 32-int(s.shift) {
		return -1, fmt.Errorf("%w: subnet %v is not a /%d", ErrBadRoute, p, 32-s.shift)
	}
	a := ipconv.U32(p.Addr())
	if a&s.netMask != s.network || a&^s.subMask != 0 {
		return -1, fmt.Errorf("%w: subnet %v is not a subnet of the network", ErrBadRoute, p)
	}
	return int((a - s.network) >> s.shift), nil
}

// SetLocal sets our own subnet: ingress must be addressed to it, egress to it is
// dropped, and ICMP errors come from its first address.
func (t *Table) SetLocal(subnet netip.Prefix) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.snap.Load()
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
		i, err := n.index(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n.drop(i)
	}
	for _, r := range set {
		i, err := n.index(r.Subnet)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !r.PublicIP.Is4() {
			errs = append(errs, fmt.Errorf("%w: subnet %v: public IP %v is not IPv4", ErrBadRoute, r.Subnet, r.PublicIP))
			continue
		}
		if n.hasLocal && r.Subnet == n.localPref {
			continue
		}
		n.drop(i)
		p := &Peer{Subnet: r.Subnet, PublicIP: r.PublicIP, ip: ipconv.U32(r.PublicIP)}
		n.bySubnet[i] = p
		n.byIP[p.ip]++
		n.routes++
	}
	t.snap.Store(n)
	return errors.Join(errs...)
}

func (s *Snapshot) drop(i int) {
	old := s.bySubnet[i]
	if old == nil {
		return
	}
	s.bySubnet[i] = nil
	s.routes--
	if s.byIP[old.ip]--; s.byIP[old.ip] <= 0 {
		delete(s.byIP, old.ip)
	}
}

// Len is the number of peers.
func (s *Snapshot) Len() int { return s.routes }

// Routes lists the peers (for diagnostics; allocates).
func (s *Snapshot) Routes() []Route {
	var rs []Route
	for _, p := range s.bySubnet {
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
