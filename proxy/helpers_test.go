package proxy

import (
	"net/netip"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"go.uber.org/zap"
)

// ipv4Packet builds an IPv4 packet with gopacket (checksum and lengths computed).
func ipv4Packet(src, dst netip.Addr, ttl uint8, proto layers.IPProtocol, payload []byte) []byte {
	ip := &layers.IPv4{
		Version: 4, IHL: 5, TTL: ttl, Protocol: proto, Id: 0x1234,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice(),
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, gopacket.Payload(payload))
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// icmpEcho builds an ICMP echo request from src to dst.
func icmpEcho(src, dst netip.Addr, ttl uint8) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: ttl, Protocol: layers.IPProtocolICMPv4,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 7, Seq: 1}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, ic, gopacket.Payload([]byte("weft-echo")))
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

func nopLogger() *zap.Logger { return zap.NewNop() }
