package kube

import (
	"context"
	"encoding/json"
	"net/netip"
	"sync"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/lease"
)

// leaseOf reads a peer's lease off its node: its podCIDRs and flannel's annotations,
// for each family the network enables. A family whose podCIDR or public address is
// missing is left out; a node with neither family gives no lease.
func (m *Manager) leaseOf(n *corev1.Node) (lease.Lease, bool) {
	typ, ok := n.Annotations[m.key(annBackendType)]
	if !ok {
		return lease.Lease{}, false
	}
	want4, want6 := m.families()
	v4, v6 := podCIDRs(n)
	l := lease.Lease{Attrs: lease.Attrs{BackendType: typ}}
	if want4 && v4.IsValid() {
		ip, data, ok := m.family(n, annPublicIP, annBackendData, false)
		if ok {
			l.Subnet, l.Attrs.PublicIP, l.Attrs.BackendData = v4, ip, data
		}
	}
	if want6 && v6.IsValid() {
		ip, data, ok := m.family(n, annPublicIPv6, annBackendV6Data, true)
		if ok {
			l.IPv6Subnet, l.Attrs.PublicIPv6, l.Attrs.BackendV6Data = v6, ip, data
		}
	}
	if !l.Subnet.IsValid() && !l.IPv6Subnet.IsValid() {
		return lease.Lease{}, false
	}
	if site := n.Annotations[annSite]; site != "" {
		ip, err := netip.ParseAddr(n.Annotations[annSiteIP])
		if err != nil {
			m.log.Error("skipping a node's bad "+annSiteIP+" annotation", zap.String("node", n.Name), zap.Error(err))
		} else {
			l.Attrs.Site, l.Attrs.SiteIP, l.Attrs.NAT = site, ip.Unmap(), n.Annotations[annNAT] == "true"
			if v := n.Annotations[annOutside]; v != "" {
				if out, err := netip.ParseAddrPort(v); err != nil {
					m.log.Error("ignoring a node's bad "+annOutside+" annotation", zap.String("node", n.Name), zap.Error(err))
				} else {
					l.Attrs.Outside = netip.AddrPortFrom(out.Addr().Unmap(), out.Port())
				}
			}
		}
	}
	if !l.Attrs.PublicIP.IsValid() {
		l.Attrs.PublicIP = netip.IPv4Unspecified() // as in flanneld's IPv6-only leases
	}
	return l, true
}

// family reads one family's public address and backend data annotations of n. The
// family needs a good public address; backend data that is missing or not JSON is
// passed on as none, as flanneld passes it on, for the backend to judge: host-gw
// reads none and routes the peer, vxlan skips a peer without a VtepMAC.
func (m *Manager) family(n *corev1.Node, ipAnn, dataAnn string, v6 bool) (netip.Addr, json.RawMessage, bool) {
	ipStr, ok := n.Annotations[m.key(ipAnn)]
	if !ok {
		return netip.Addr{}, nil, false
	}
	ip, err := parseFamily(ipStr, v6)
	if err != nil {
		m.log.Error("skipping a node's bad "+ipAnn+" annotation", zap.String("node", n.Name), zap.String("value", ipStr), zap.Error(err))
		return netip.Addr{}, nil, false
	}
	data := n.Annotations[m.key(dataAnn)]
	switch {
	case data == "" || data == "null":
		return ip, nil, true
	case !json.Valid([]byte(data)):
		m.log.Warn("a node's "+dataAnn+" annotation is not JSON; taking it as none", zap.String("node", n.Name), zap.String("value", data))
		return ip, nil, true
	}
	return ip, json.RawMessage(data), true
}

// changedNodes collects the names of the nodes the informer reported changed since
// the last take, and signals ch.
type changedNodes struct {
	mu    sync.Mutex
	names map[string]struct{}
	ch    chan struct{}
}

func (c *changedNodes) add(obj any) {
	var name string
	switch o := obj.(type) {
	case *corev1.Node:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		name = o.Key // nodes are cluster-scoped: the key is the name
	default:
		return
	}
	c.mu.Lock()
	c.names[name] = struct{}{}
	c.mu.Unlock()
	notify(c.ch)
}

func (c *changedNodes) take() map[string]struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = map[string]struct{}{}
	return out
}

// subscribe collects the names of changed nodes (at first every node the cache holds)
// until unsubscribe is called.
func (m *Manager) subscribe(ctx context.Context) (*changedNodes, func(), error) {
	if err := m.start(ctx); err != nil {
		return nil, nil, err
	}
	c := &changedNodes{names: map[string]struct{}{}, ch: make(chan struct{}, 1)}
	reg, err := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.add,
		UpdateFunc: func(_, obj any) { c.add(obj) },
		DeleteFunc: c.add,
	})
	if err != nil {
		return nil, nil, err
	}
	notify(c.ch)
	return c, func() { _ = m.informer.RemoveEventHandler(reg) }, nil
}

// Watch sends the other nodes' leases: a snapshot, then the differences for the nodes
// the informer reports changed (a change costs the same with 100 nodes as with 5,000).
func (m *Manager) Watch(ctx context.Context, own lease.Key, events chan<- []lease.Event) error {
	c, unsubscribe, err := m.subscribe(ctx)
	if err != nil {
		return err
	}
	defer unsubscribe()
	known := map[string]lease.Lease{}
	first := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ch:
		}
		names := c.take()
		var evs []lease.Event
		if first {
			evs = m.diff(known, own)
		} else {
			evs = m.diffNodes(known, own, names)
		}
		if len(evs) == 0 && !first {
			continue
		}
		first = false
		select {
		case events <- evs:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// diff makes known (node name -> lease) match the informer's store.
func (m *Manager) diff(known map[string]lease.Lease, own lease.Key) []lease.Event {
	evs := []lease.Event{}
	seen := map[string]bool{}
	for _, obj := range m.informer.GetStore().List() {
		n := obj.(*corev1.Node)
		if m.diffOne(known, own, n.Name, n, &evs) {
			seen[n.Name] = true
		}
	}
	for name, l := range known {
		if !seen[name] {
			delete(known, name)
			evs = append(evs, lease.Event{Type: lease.Removed, Lease: l})
		}
	}
	return evs
}

// diffNodes makes known match the informer's store for the named nodes alone.
func (m *Manager) diffNodes(known map[string]lease.Lease, own lease.Key, names map[string]struct{}) []lease.Event {
	evs := []lease.Event{}
	store := m.informer.GetStore()
	for name := range names {
		var n *corev1.Node
		if obj, ok, err := store.GetByKey(name); err == nil && ok {
			n, _ = obj.(*corev1.Node)
		}
		m.diffOne(known, own, name, n, &evs)
	}
	return evs
}

// diffOne brings known[name] in line with node n (nil: gone), appending the events
// that do so; it reports whether the node holds a peer's lease.
func (m *Manager) diffOne(known map[string]lease.Lease, own lease.Key, name string, n *corev1.Node, evs *[]lease.Event) bool {
	var l lease.Lease
	ok := n != nil && name != m.opts.NodeName
	if ok {
		l, ok = m.leaseOf(n)
		ok = ok && l.Key() != own
	}
	old, had := known[name]
	if !ok {
		if had {
			delete(known, name)
			*evs = append(*evs, lease.Event{Type: lease.Removed, Lease: old})
		}
		return false
	}
	if had && old.Key() == l.Key() && old.Attrs.Equal(l.Attrs) {
		return true
	}
	if had && old.Key() != l.Key() {
		*evs = append(*evs, lease.Event{Type: lease.Removed, Lease: old})
	}
	known[name] = l
	*evs = append(*evs, lease.Event{Type: lease.Added, Lease: l})
	return true
}
