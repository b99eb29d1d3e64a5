package encap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/proxy"
	"github.com/weftnet/weft/tun"
)

// UDPDevice is the name of the udp backend's TUN device, as flanneld names it.
const UDPDevice = "flannel0"

// udpOverhead is what the outer IPv4 and UDP headers take from the underlay MTU.
const udpOverhead = 28

const maxUDPWorkers = 8

// udpOptions are the udp backend's options in the network config's Backend object.
type udpOptions struct {
	Port    int
	MTU     int
	Workers int
	// BusyPoll (a duration string such as "200us"; weft only) keeps each worker
	// polling for that long after a packet instead of sleeping: lower RTT for CPU.
	BusyPoll time.Duration
}

// maxBusyPoll bounds Backend.BusyPoll; a longer window is a core per worker spent for
// good, which no setting should do by accident.
const maxBusyPoll = time.Second

// parseUDPOptions reads the Backend object; unknown options and bad values are
// errors wrapping ErrBadOption that name the option.
func parseUDPOptions(raw json.RawMessage, extMTU int) (udpOptions, error) {
	o := udpOptions{Port: proxy.DefaultPort, MTU: extMTU - udpOverhead, Workers: min(runtime.NumCPU(), maxUDPWorkers)}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return o, o.check()
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return o, fmt.Errorf("%w: Backend is not a JSON object: %w", ErrBadOption, err)
	}
	for k, v := range m {
		var dst *int
		switch strings.ToLower(k) {
		case "type":
			var t string
			if err := json.Unmarshal(v, &t); err != nil || !strings.EqualFold(t, "udp") {
				return o, fmt.Errorf("%w: Type %s is not \"udp\"", ErrBadOption, v)
			}
			continue
		case "port":
			dst = &o.Port
		case "mtu":
			dst = &o.MTU
		case "workers":
			dst = &o.Workers
		case "busypoll":
			var d string
			if err := json.Unmarshal(v, &d); err != nil {
				return o, fmt.Errorf("%w: %s: %s is not a duration string such as \"200us\"", ErrBadOption, k, v)
			}
			var err error
			if o.BusyPoll, err = time.ParseDuration(d); err != nil {
				return o, fmt.Errorf("%w: %s: %w", ErrBadOption, k, err)
			}
			continue
		default:
			return o, fmt.Errorf("%w: %q is not an option of the udp backend (Port, MTU, Workers, BusyPoll)", ErrBadOption, k)
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return o, fmt.Errorf("%w: %s: %s is not an integer", ErrBadOption, k, v)
		}
	}
	return o, o.check()
}

func (o udpOptions) check() error {
	switch {
	case o.Port < 1 || o.Port > 65535:
		return fmt.Errorf("%w: Port %d is not in 1-65535", ErrBadOption, o.Port)
	case o.MTU < 68 || o.MTU > 65535:
		return fmt.Errorf("%w: MTU %d is not in 68-65535", ErrBadOption, o.MTU)
	case o.Workers < 1 || o.Workers > maxUDPWorkers:
		return fmt.Errorf("%w: Workers %d is not in 1-%d", ErrBadOption, o.Workers, maxUDPWorkers)
	case o.BusyPoll < 0 || o.BusyPoll > maxBusyPoll:
		return fmt.Errorf("%w: BusyPoll %s is not in 0-%s", ErrBadOption, o.BusyPoll, maxBusyPoll)
	}
	return nil
}

// udpBackend carries the overlay in UDP datagrams through flannel0 and proxy/.
type udpBackend struct {
	cfg   *lease.Config
	opts  udpOptions
	log   *zap.Logger
	table *proxy.Table

	mu    sync.Mutex
	dev   *tun.Device
	px    *proxy.Proxy
	own   lease.Lease
	ready chan struct{} // closed once the data path is open
}

// NewUDP returns the udp backend. It opens nothing: Register opens flannel0 and the
// sockets in the network namespace of the calling thread. flannel0 is opened with TUN
// offloads (TSO in, coalesced TCP out) unless WEFT_TUN_OFFLOAD=0; proxy.Config.ApplyEnv
// lists the other switches.
func NewUDP(cfg *lease.Config, ext ExternalInterface, log *zap.Logger) (Backend, error) {
	opts, err := parseUDPOptions(cfg.Backend, ext.MTU)
	if err != nil {
		return nil, err
	}
	table, err := proxy.NewTable(cfg.Network, cfg.SubnetLen)
	if err != nil {
		return nil, fmt.Errorf("udp backend: %w", err)
	}
	return &udpBackend{cfg: cfg, opts: opts, log: log, table: table, ready: make(chan struct{})}, nil
}

func (b *udpBackend) Type() string { return "udp" }

// BackendData is empty: flanneld publishes none for udp.
func (b *udpBackend) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }

func (b *udpBackend) MTU() int { return b.opts.MTU }

// Register opens flannel0 (first call) and gives it own's network address.
func (b *udpBackend) Register(ctx context.Context, own lease.Lease) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.table.SetLocal(own.Subnet); err != nil {
		return fmt.Errorf("udp backend: own subnet: %w", err)
	}
	if b.dev == nil {
		offload, err := envBool("WEFT_TUN_OFFLOAD", true)
		if err != nil {
			return fmt.Errorf("udp backend: %w", err)
		}
		dev, err := tun.Open(tun.Config{Name: UDPDevice, Queues: b.opts.Workers, Offload: offload}, b.log)
		if err != nil {
			return fmt.Errorf("udp backend: %w", err)
		}
		b.dev = dev
	}
	setup := tun.Setup{Addr: own.Subnet.Masked().Addr(), MTU: b.opts.MTU, Routes: []netip.Prefix{b.cfg.Network}}
	if err := b.dev.Configure(setup); err != nil {
		return fmt.Errorf("udp backend: %w", err)
	}
	b.own = own
	if b.px != nil {
		return nil
	}
	pcfg := proxy.Config{Port: b.opts.Port, MTU: b.opts.MTU, BusyPoll: b.opts.BusyPoll}
	if err := pcfg.ApplyEnv(); err != nil {
		return fmt.Errorf("udp backend: %w", err)
	}
	qs := b.dev.Queues()
	queues := make([]proxy.TUN, len(qs))
	for i, q := range qs {
		queues[i] = q
	}
	px, err := proxy.New(pcfg, b.table, queues, b.log)
	if err != nil {
		return fmt.Errorf("udp backend: %w", err)
	}
	b.px = px
	close(b.ready)
	return nil
}

// HandleEvents updates the subnet table in one copy-on-write step per batch.
func (b *udpBackend) HandleEvents(_ context.Context, events []lease.Event) {
	b.mu.Lock()
	own := b.own.Subnet
	b.mu.Unlock()
	var set []proxy.Route
	var remove []netip.Prefix
	for _, e := range events {
		l := e.Lease
		if l.Subnet == own {
			continue
		}
		if e.Type == lease.Added && lease.CompatibleWith("udp", l) {
			set = append(set, proxy.Route{Subnet: l.Subnet, PublicIP: l.Attrs.PublicIP})
			continue
		}
		// Removed, or now of another backend type: no longer reachable over udp.
		remove = append(remove, l.Subnet)
	}
	if err := b.table.Apply(set, remove); err != nil {
		b.log.Warn("udp backend: some leases ignored", zap.Error(err))
	}
	b.log.Debug("udp routes updated", zap.Int("set", len(set)), zap.Int("removed", len(remove)),
		zap.Int("peers", b.table.Load().Len()))
}

// Run forwards until ctx ends; it waits for Register first.
func (b *udpBackend) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-b.ready:
	}
	return b.px.Run(ctx)
}

// Close closes the sockets and removes flannel0.
func (b *udpBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	if b.px != nil {
		err = b.px.Close()
	}
	if b.dev != nil {
		if derr := b.dev.Close(); err == nil {
			err = derr
		}
		b.dev = nil
	}
	return err
}

// Stats returns the data path's counters as a proxy.Stats (zero before Register).
func (b *udpBackend) Stats() any {
	b.mu.Lock()
	px := b.px
	b.mu.Unlock()
	if px == nil {
		return proxy.Stats{}
	}
	return px.Stats()
}

// envBool reads a boolean environment variable, def when unset.
func envBool(name string, def bool) (bool, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return b, nil
}
