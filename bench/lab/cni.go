package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/lease"
)

// ErrCNI is wrapped by errors of the CNI plugin.
var ErrCNI = errors.New("cni plugin")

// AttachCNIPod makes a pod namespace on h and attaches it with the real flannel CNI
// plugin, which reads subnetFile (a daemon's subnet.env) and delegates to the bridge
// and host-local plugins. cniPath is CNI_PATH: directories, colon-separated, the
// first holding the flannel plugin. Close runs the plugin's DEL for the pod.
func (l *Lab) AttachCNIPod(ctx context.Context, h *Host, subnetFile, cniPath string) (*Pod, error) {
	dirs := strings.Split(cniPath, ":")
	plugin := filepath.Join(dirs[0], "flannel")
	env, err := lease.ReadSubnetEnv(subnetFile)
	if err != nil {
		return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
	}
	ns, err := netns.New(l.spec.Prefix + "-" + h.Name + "-pod")
	if err != nil {
		return nil, fmt.Errorf("pod on %s: %w", h.Name, err)
	}
	name := "weft-" + ns.Name
	conf, _ := json.Marshal(map[string]any{
		"cniVersion": "0.3.1", "name": name, "type": "flannel",
		"subnetFile": subnetFile, "dataDir": filepath.Join(l.dir, h.Name+"-cni"),
		"delegate": map[string]any{"isDefaultGateway": true},
	})
	run := func(command string) ([]byte, error) {
		cmd := exec.Command("ip", "netns", "exec", h.NS.Name, plugin)
		cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+ns.Name,
			"CNI_NETNS=/var/run/netns/"+ns.Name, "CNI_IFNAME=eth0", "CNI_PATH="+cniPath)
		cmd.Stdin = strings.NewReader(string(conf))
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				out = append(out, ee.Stderr...)
			}
			return nil, fmt.Errorf("%w: %s %s on %s: %w: %s", ErrCNI, plugin, command, h.Name, err, out)
		}
		return out, nil
	}
	gwNet := env.Subnet
	if !gwNet.IsValid() {
		gwNet = env.IPv6Subnet // an IPv6-only subnet.env
	}
	p := &Pod{Host: h, NS: ns, MTU: env.MTU, Gateway: gwNet.Masked().Addr().Next()}
	p.del = func() error {
		_, err := run("DEL")
		_ = os.RemoveAll(filepath.Join("/var/lib/cni/networks", name))
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.Join(ErrClosed, ns.Close())
	}
	l.pods = append(l.pods, p)
	l.mu.Unlock()
	l.saveState()
	out, err := run("ADD")
	if err != nil {
		return nil, err
	}
	if err := p.setCNIAddrs(out, env.IPv6Subnet.IsValid()); err != nil {
		return nil, err
	}
	return p, nil
}

// setCNIAddrs takes the pod's addresses from the flannel plugin's ADD result out:
// one per family, which subnet.env has an IPv6 subnet (v6) or not.
func (p *Pod) setCNIAddrs(out []byte, v6 bool) error {
	h := p.Host
	var result struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &result); err != nil || len(result.IPs) == 0 {
		return fmt.Errorf("%w: ADD on %s: result %s: %w", ErrCNI, h.Name, out, err)
	}
	// One address per family subnet.env has: IPv4 first, as the plugin lists them.
	for _, ip := range result.IPs {
		pfx, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return fmt.Errorf("%w: ADD on %s: address: %w", ErrCNI, h.Name, err)
		}
		switch {
		case pfx.Addr().Is6() && !p.Addr6.IsValid():
			p.Addr6 = pfx.Addr()
		case pfx.Addr().Is4() && !p.Addr.IsValid():
			p.Addr = pfx.Addr()
		}
	}
	if !p.Addr.IsValid() {
		p.Addr = p.Addr6
	}
	if v6 != p.Addr6.IsValid() {
		return fmt.Errorf("%w: ADD on %s: result %s: an IPv6 address without FLANNEL_IPV6_SUBNET, or none with it", ErrCNI, h.Name, out)
	}
	return nil
}
