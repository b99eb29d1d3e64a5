// Package tun opens the TUN device of weft's udp backend (flannel0) with one or more
// queues and configures it: address, MTU, link state and the route of the overlay.
//
// A Queue is read and written in batches, wireguard-go style: the caller owns the
// buffers and leaves offset bytes of headroom in front of each packet, so a later
// offload (virtio-net header, GSO) can use that room without new copies.
package tun

import (
	"errors"
	"net/netip"

	"github.com/weftnet/weft/tun/offload"
)

// VnetHdrLen is the size of the virtio-net header in front of every packet of a queue
// opened with offloads (struct virtio_net_hdr, no num_buffers); package offload reads
// and writes it, and does the segmentation and coalescing such a queue needs.
const VnetHdrLen = offload.VnetHdrLen

// ErrClosed is returned by reads and writes on a closed queue.
var ErrClosed = errors.New("tun queue closed")

// Config says which device to open and how to set it up.
type Config struct {
	// Name of the device, e.g. "flannel0".
	Name string
	// Queues is the number of queues (file descriptors) to open; more than one needs
	// IFF_MULTI_QUEUE. 0 means 1.
	Queues int
	// NoMultiQueue forces a single queue (the kernel feature switched off).
	NoMultiQueue bool
	// Offload opens the queues with a virtio-net header and TCP (IPv4, IPv6) segmentation and
	// checksum offload (Queue.VnetHdr); if the kernel refuses, Open falls back to
	// plain queues.
	Offload bool
	// NoUSO leaves out UDP segmentation offload (Queue.USO) when Offload is set;
	// kernels before 6.2 lack it and get queues without it anyway.
	NoUSO bool
	// TxQueueLen, if positive, sets the device's transmit queue length.
	TxQueueLen int
	// Persist makes the device outlive its queues: Close then leaves it, with its
	// addresses, routes and MTU, for the next process to attach to (Open of the same
	// name), and only Remove deletes it. Without Persist the kernel removes the device
	// with its last queue.
	Persist bool
}

// Setup is the layer-3 configuration of an open device.
type Setup struct {
	// Addr is given to the device as a /32 (flannel: the subnet's network address).
	// It may be left out when Addr6 is given (an IPv6-only network).
	Addr netip.Addr
	// Addr6, when valid, is given to the device as a /128 (weft's IPv6 overlay: the
	// IPv6 subnet's first address).
	Addr6 netip.Addr
	// MTU of the device.
	MTU int
	// Routes are routed to the device (flannel: the whole overlay Network; weft
	// adds the IPv6Network).
	Routes []netip.Prefix
}
