package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/kube"
)

// kubeManager is --kube-subnet-mgr: leases from the nodes' podCIDRs.
func (d *daemon) kubeManager() (lease.Manager, error) {
	d.log.Debug("EVENT_QUEUE_DEPTH changes nothing in weftd: its node watch has no event queue",
		zap.Int("depth", d.cfg.KubeEventQueueDepth))
	opts := *d.cfg.Kube
	opts.Version = d.cfg.Build.Version
	return kube.New(opts, d.log.Named("kube"))
}

// kubeCacheSyncTimeout is how long flanneld waits for its node cache before it gives
// up (its nodeControllerSyncTimeout).
const kubeCacheSyncTimeout = 10 * time.Minute

// errCacheNotSynced: the node cache did not sync within kubeCacheSyncTimeout.
var errCacheNotSynced = errors.New("node cache not synced")

// waitSynced waits up to timeout for mgr's cache, as flanneld waits for its node
// controller: past it, an error wrapping errCacheNotSynced and
// context.DeadlineExceeded (weftd exits, as flanneld), unless CONT_WHEN_CACHE_NOT_READY
// is "true": then it logs an error and returns nil, and Acquire goes on waiting.
func (d *daemon) waitSynced(ctx context.Context, mgr lease.Manager, timeout time.Duration) error {
	s, ok := mgr.(lease.CacheSyncer)
	if !ok {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := s.WaitSynced(wctx)
	switch {
	case err == nil || ctx.Err() != nil:
		return nil // synced, or stopped: the caller sees ctx
	case !errors.Is(err, context.DeadlineExceeded):
		return err
	case d.cfg.ContWhenCacheNotReady:
		d.log.Error("timed out waiting for the node cache to sync; continuing (CONT_WHEN_CACHE_NOT_READY=true)",
			zap.Duration("waited", timeout))
		return nil
	}
	return fmt.Errorf("%w within %s (CONT_WHEN_CACHE_NOT_READY=true keeps waiting): %w", errCacheNotSynced, timeout, err)
}

// publicIPs are the addresses peers should send to, IPv4 and IPv6 (the latter only
// on a network with IPv6): the store's choice when it makes one (it wins over
// --public-ip and --public-ipv6, as in flanneld), else the flag ("" for the
// interface's).
func (d *daemon) publicIPs(ctx context.Context, mgr lease.Manager, cfg *lease.Config) (string, string, error) {
	v4, v6 := d.cfg.PublicIP, d.cfg.PublicIPv6
	p, ok := mgr.(lease.PublicAddressSource)
	if !ok {
		return v4, v6, nil
	}
	if cfg.EnableIPv4 {
		ip, err := p.NodePublicIP(ctx)
		if err != nil {
			return "", "", fmt.Errorf("public IP: %w", err)
		}
		v4 = d.overridden("--public-ip", v4, ip)
	}
	if cfg.EnableIPv6 {
		ip, err := p.NodePublicIPv6(ctx)
		if err != nil {
			return "", "", fmt.Errorf("public IPv6: %w", err)
		}
		v6 = d.overridden("--public-ipv6", v6, ip)
	}
	return v4, v6, nil
}

// overridden is the store's address ip when valid, else flagValue.
func (d *daemon) overridden(flag, flagValue string, ip netip.Addr) string {
	if !ip.IsValid() {
		return flagValue
	}
	if flagValue != "" && flagValue != ip.String() {
		d.log.Info("the node's annotation overrides "+flag, zap.String(flag, flagValue), zap.Stringer("address", ip))
	}
	return ip.String()
}
