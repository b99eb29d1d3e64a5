package firewall

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
)

// ErrNoIPv6 is wrapped when IPv6 rules are asked for on a host where the IPv6
// firewall could not be set up (ip6tables missing, say).
var ErrNoIPv6 = errors.New("no IPv6 firewall")

// dual is New's Firewall: one implementation per address family, each Set call
// going to its network's family. v6 is nil when it could not be made (err6 says why).
type dual struct {
	v4, v6 Firewall
	err6   error
}

func (d *dual) of(network netip.Prefix) (Firewall, error) {
	if !network.Addr().Is6() {
		return d.v4, nil
	}
	if d.v6 == nil {
		return nil, fmt.Errorf("%w: %w", ErrNoIPv6, d.err6)
	}
	return d.v6, nil
}

func (d *dual) families() []Firewall {
	if d.v6 == nil {
		return []Firewall{d.v4}
	}
	return []Firewall{d.v4, d.v6}
}

func (d *dual) SetMasq(ctx context.Context, network, subnet netip.Prefix) error {
	fw, err := d.of(network)
	if err != nil {
		return err
	}
	return fw.SetMasq(ctx, network, subnet)
}

func (d *dual) SetForward(ctx context.Context, network netip.Prefix) error {
	fw, err := d.of(network)
	if err != nil {
		return err
	}
	return fw.SetForward(ctx, network)
}

// Repair repairs both families; a family without rules set costs nothing.
func (d *dual) Repair(ctx context.Context) (bool, error) {
	repaired := false
	var errs []error
	for _, fw := range d.families() {
		r, err := fw.Repair(ctx)
		repaired = repaired || r
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fw.Name(), err))
		}
	}
	return repaired, errors.Join(errs...)
}

func (d *dual) Remove(ctx context.Context) error {
	var errs []error
	for _, fw := range d.families() {
		errs = append(errs, fw.Remove(ctx))
	}
	return errors.Join(errs...)
}

func (d *dual) Name() string { return d.v4.Name() }

func (d *dual) Backend() string { return d.v4.Backend() }
