package udp

import (
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/proxy"
)

// udpOverhead is what the outer IPv4 and UDP headers take from the underlay MTU;
// over the IPv6 underlay the outer header is 20 bytes longer.
const (
	udpOverhead     = 28
	udp6ExtraHeader = 20
)

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

// Tuning is how the udp data path is tuned beyond the network config: weftd fills
// it from its WEFT_UDP_* and WEFT_TUN_OFFLOAD environment variables. The zero value
// is the default data path.
type Tuning struct {
	// Tuning goes to proxy.Config as it is.
	proxy.Tuning
	// BusyPoll, when set, replaces the network config's Backend.BusyPoll (0 turns it off).
	BusyPoll *time.Duration
	// NoTUNOffload opens flannel0 without the virtio-net header offloads.
	NoTUNOffload bool
	// NoTUNUSO opens flannel0 with the offloads but without UDP segmentation
	// offload (USO: coalesced UDP on ingress).
	NoTUNUSO bool
}

// parseUDPOptions reads the Backend object and applies tuning; unknown options and
// bad values are errors wrapping encap.ErrBadOption that name the option.
func parseUDPOptions(raw json.RawMessage, extMTU int, tuning Tuning) (udpOptions, proxy.Config, error) {
	o := udpOptions{Port: proxy.DefaultPort, MTU: extMTU - udpOverhead, Workers: min(runtime.NumCPU(), maxUDPWorkers)}
	if err := encap.DecodeOptions("udp", raw, &o); err != nil {
		return o, proxy.Config{}, err
	}
	if tuning.BusyPoll != nil {
		o.BusyPoll = *tuning.BusyPoll
	}
	pc := proxy.Config{Port: o.Port, MTU: o.MTU, BusyPoll: o.BusyPoll, Tuning: tuning.Tuning}
	// The data path's bounds are proxy's: one check for the config's and the
	// environment's values alike. (An explicit Port 0 is no default here: flanneld
	// would listen on a random port.)
	err := pc.Check()
	if o.Port == 0 {
		err = proxy.CheckPort(o.Port)
	}
	if err != nil {
		return o, pc, fmt.Errorf("%w: udp backend: %w", encap.ErrBadOption, err)
	}
	if o.Workers < 1 || o.Workers > maxUDPWorkers {
		return o, pc, fmt.Errorf("%w: udp backend: Workers %d is not in 1-%d", encap.ErrBadOption, o.Workers, maxUDPWorkers)
	}
	return o, pc, nil
}
