package lab

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/weftnet/weft/bench/netns"
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
// route via cni0, MTU FLANNEL_MTU on every link (1500 when env has none). With an IPv6
// subnet in env the same is done for IPv6 (Addr6, and Addr too on an IPv6-only
// network).
func (l *Lab) AttachPod(ctx context.Context, h *Host, env lease.SubnetEnv) (*Pod, error) {
	var fams []podFamily
	for _, sub := range []netip.Prefix{env.Subnet.Masked(), env.IPv6Subnet.Masked()} {
		if sub.IsValid() {
			fams = append(fams, podFamily{sub: sub})
		}
	}
	if len(fams) == 0 {
		return nil, fmt.Errorf("pod on %s: subnet.env has no subnet", h.Name)
	}
	mtu := env.MTU
	if mtu == 0 {
		mtu = 1500
	}
	l.mu.Lock()
	h.pods++
	n := h.pods
	l.mu.Unlock()
	for i := range fams {
		if err := fams[i].pick(n); err != nil {
			return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
		}
	}
	ns, err := netns.New(l.spec.Prefix + "-" + h.Name + "-pod")
	if err != nil {
		return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
	}
	p := &Pod{Host: h, NS: ns, Addr: fams[0].addr, Gateway: fams[0].gw, MTU: mtu}
	if last := fams[len(fams)-1]; last.sub.Addr().Is6() {
		p.Addr6 = last.addr
	}
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
		cmds := [][]string{{"ip", "link", "add", "cni0", "mtu", m, "type", "bridge"}}
		for _, f := range fams {
			cmds = append(cmds, f.cmd("addr", "add", fmt.Sprintf("%s/%d", f.gw, f.sub.Bits()), "dev", "cni0"))
		}
		cmds = append(cmds, []string{"ip", "link", "set", "cni0", "up"})
		if err := runAll(ctx, h.NS, cmds); err != nil {
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
		cmds := [][]string{{"ip", "link", "set", "eth0", "mtu", m}}
		for _, f := range fams {
			cmds = append(cmds, f.cmd("addr", "add", fmt.Sprintf("%s/%d", f.addr, f.sub.Bits()), "dev", "eth0"),
				f.cmd("route", "add", "default", "via", f.gw.String()))
		}
		err = runAll(ctx, ns, cmds)
	}
	if err != nil {
		return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
	}
	return p, nil
}

// podFamily is one family of a pod's addressing: its subnet, cni0's address (the
// subnet's first) and the pod's.
type podFamily struct {
	sub      netip.Prefix
	gw, addr netip.Addr
}

// pick chooses the addresses of the n-th pod of the host.
func (f *podFamily) pick(n int) error {
	if f.sub.Addr().Is4() && f.sub.Bits() > 30 {
		return fmt.Errorf("subnet %v is not usable", f.sub)
	}
	f.gw = f.sub.Addr().Next()
	f.addr = f.gw
	for range n {
		f.addr = f.addr.Next()
	}
	if !f.sub.Contains(f.addr) {
		return fmt.Errorf("subnet %v is full", f.sub)
	}
	return nil
}

// cmd is an ip command for the family (ip -6 for IPv6); an IPv6 address is added
// without duplicate address detection, so it is usable at once.
func (f *podFamily) cmd(args ...string) []string {
	if f.sub.Addr().Is4() {
		return append([]string{"ip"}, args...)
	}
	c := append([]string{"ip", "-6"}, args...)
	if args[0] == "addr" {
		c = append(c, "nodad")
	}
	return c
}
