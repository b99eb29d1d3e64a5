package lab

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/weftnet/weft/internal/netns"
	"github.com/weftnet/weft/lease"
)

func decodeB64(s string) ([]byte, error)  { return base64.StdEncoding.DecodeString(s) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Pod is a pod namespace attached to its host's cni0 bridge.
type Pod struct {
	Host    *Host
	NS      *netns.NS
	Addr    netip.Addr // eth0's address: the subnet's second address (IPv6-only: the IPv6 one)
	Addr6   netip.Addr // eth0's IPv6 address, for a pod the CNI plugin attached on a network with IPv6
	Gateway netip.Addr // cni0's address: the subnet's first address
	MTU     int
	del     func() error // the CNI plugin's DEL, for pods it attached
}

// remove detaches the pod (CNI DEL) and deletes its namespace.
func (p *Pod) remove() error {
	var err error
	if p.del != nil {
		err = p.del()
	}
	if p.NS != nil {
		err = errors.Join(err, p.NS.Close())
	}
	return err
}

// AttachPod makes a pod namespace on h as the CNI bridge plugin would from env (a
// daemon's subnet.env): bridge cni0 on the host gets the subnet's first address, a
// veth joins the pod's eth0 to it, the pod gets the next free address and a default
// route via cni0, MTU FLANNEL_MTU on every link (1500 when env has none).
func (l *Lab) AttachPod(ctx context.Context, h *Host, env lease.SubnetEnv) (*Pod, error) {
	sub := env.Subnet.Masked()
	if !sub.IsValid() || sub.Bits() > 30 {
		return nil, fmt.Errorf("pod on %s: subnet %v is not usable", h.Name, env.Subnet)
	}
	mtu := env.MTU
	if mtu == 0 {
		mtu = 1500
	}
	l.mu.Lock()
	h.pods++
	n := h.pods
	l.mu.Unlock()
	gw := sub.Addr().Next()
	addr := gw
	for i := 0; i < n; i++ {
		addr = addr.Next()
	}
	if !sub.Contains(addr) {
		return nil, fmt.Errorf("pod on %s: subnet %v is full", h.Name, sub)
	}
	ns, err := netns.New(l.spec.Prefix + "-" + h.Name + "-pod")
	if err != nil {
		return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
	}
	p := &Pod{Host: h, NS: ns, Addr: addr, Gateway: gw, MTU: mtu}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.Join(ErrClosed, ns.Close())
	}
	l.pods = append(l.pods, p)
	l.mu.Unlock()
	l.saveState()
	m := strconv.Itoa(mtu)
	if _, err := h.NS.Run(ctx, "ip", "link", "show", "cni0"); err != nil {
		err = runAll(ctx, h.NS, [][]string{
			{"ip", "link", "add", "cni0", "mtu", m, "type", "bridge"},
			{"ip", "addr", "add", fmt.Sprintf("%s/%d", gw, sub.Bits()), "dev", "cni0"},
			{"ip", "link", "set", "cni0", "up"},
		})
		if err != nil {
			return nil, fmt.Errorf("pod on %s: cni0: %w", h.Name, err)
		}
	}
	veth := "veth" + strconv.Itoa(n)
	if err := netns.Veth(h.NS, veth, ns, "eth0"); err != nil {
		return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
	}
	err = runAll(ctx, h.NS, [][]string{
		{"ip", "link", "set", veth, "mtu", m},
		{"ip", "link", "set", veth, "master", "cni0"},
	})
	if err == nil {
		err = runAll(ctx, ns, [][]string{
			{"ip", "link", "set", "eth0", "mtu", m},
			{"ip", "addr", "add", fmt.Sprintf("%s/%d", addr, sub.Bits()), "dev", "eth0"},
			{"ip", "route", "add", "default", "via", gw.String()},
		})
	}
	if err != nil {
		return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
	}
	return p, nil
}
