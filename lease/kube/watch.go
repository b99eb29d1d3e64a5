package kube

import (
	"context"
	"encoding/json"
	"net/netip"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/lease"
)

// leaseOf reads a peer's lease off its node: a podCIDR and flannel's annotations.
func (m *Manager) leaseOf(n *corev1.Node) (lease.Lease, bool) {
	subnet, err := podCIDR(n)
	if err != nil {
		return lease.Lease{}, false
	}
	typ, okT := n.Annotations[m.key(annBackendType)]
	ipStr, okIP := n.Annotations[m.key(annPublicIP)]
	data, okD := n.Annotations[m.key(annBackendData)]
	if !okT || !okIP || !okD {
		return lease.Lease{}, false
	}
	ip, err := netip.ParseAddr(ipStr)
	if err != nil || !ip.Is4() {
		m.log.Error("skipping node with a bad public-ip annotation", zap.String("node", n.Name), zap.String("public-ip", ipStr))
		return lease.Lease{}, false
	}
	attrs := lease.Attrs{PublicIP: ip, BackendType: typ}
	if data != "" && data != "null" {
		if !json.Valid([]byte(data)) {
			m.log.Error("skipping node with bad backend-data", zap.String("node", n.Name))
			return lease.Lease{}, false
		}
		attrs.BackendData = json.RawMessage(data)
	}
	return lease.Lease{Subnet: subnet, Attrs: attrs}, true
}

// subscribe signals ch on every change to any node until unsubscribe is called.
func (m *Manager) subscribe(ctx context.Context) (<-chan struct{}, func(), error) {
	if err := m.start(ctx); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	h := func() { notify(ch) }
	reg, err := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { h() },
		UpdateFunc: func(any, any) { h() },
		DeleteFunc: func(any) { h() },
	})
	if err != nil {
		return nil, nil, err
	}
	notify(ch)
	return ch, func() { _ = m.informer.RemoveEventHandler(reg) }, nil
}

// Watch sends the other nodes' leases: a snapshot, then the differences after each
// change seen by the node informer.
func (m *Manager) Watch(ctx context.Context, own netip.Prefix, events chan<- []lease.Event) error {
	ch, unsubscribe, err := m.subscribe(ctx)
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
		case <-ch:
		}
		evs := m.diff(known, own)
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
func (m *Manager) diff(known map[string]lease.Lease, own netip.Prefix) []lease.Event {
	evs := []lease.Event{}
	seen := map[string]bool{}
	for _, obj := range m.informer.GetStore().List() {
		n := obj.(*corev1.Node)
		if n.Name == m.opts.NodeName {
			continue
		}
		l, ok := m.leaseOf(n)
		if !ok || l.Subnet == own {
			continue
		}
		seen[n.Name] = true
		old, had := known[n.Name]
		if had && old.Subnet == l.Subnet && old.Attrs.Equal(l.Attrs) {
			continue
		}
		if had && old.Subnet != l.Subnet {
			evs = append(evs, lease.Event{Type: lease.Removed, Lease: old})
		}
		known[n.Name] = l
		evs = append(evs, lease.Event{Type: lease.Added, Lease: l})
	}
	for name, l := range known {
		if !seen[name] {
			delete(known, name)
			evs = append(evs, lease.Event{Type: lease.Removed, Lease: l})
		}
	}
	return evs
}

// Hold keeps our annotations in place (re-publishing them if someone removes them)
// until ctx ends. A podCIDR is fixed for a node's life, so our lease never moves.
func (m *Manager) Hold(ctx context.Context, own lease.Lease, _ func(lease.Lease)) error {
	ch, unsubscribe, err := m.subscribe(ctx)
	if err != nil {
		return err
	}
	defer unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		if n, ok := m.node(); ok {
			if err := m.annotate(ctx, n, own.Attrs); err != nil && ctx.Err() == nil {
				m.log.Warn("re-publishing our annotations failed", zap.Error(err))
			}
		}
	}
}
