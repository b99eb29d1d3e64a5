// Package offloadtest is the test form of package offload: it builds IPv4 and IPv6
// TCP and UDP packets with gopacket and checks their checksums with a plain RFC 1071
// sum, independent of the code under test, for the tests of offload and of its users
// (proxy). Tests only: nothing in weftd imports it.
package offloadtest

import (
	"bytes"
	"encoding/binary"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TCP builds a TCP packet from src to dst (IPv4, or IPv6 with flow label 7, as src
// is), checksums computed: ports 40000 to 5201, ack 777, window 512, ACK, the
// options NOP NOP timestamps (header 32 bytes), and the flags in flags: P (PSH), F
// (FIN), C (CWR). The IPv4 ID is 100, DF set.
func TCP(src, dst netip.Addr, seq uint32, flags string, payload []byte) []byte {
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: seq, Ack: 777, Window: 512, DataOffset: 8,
		ACK: true, PSH: bytes.ContainsRune([]byte(flags), 'P'), FIN: bytes.ContainsRune([]byte(flags), 'F'),
		CWR: bytes.ContainsRune([]byte(flags), 'C'),
		Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: []byte{0, 0, 0, 1, 0, 0, 0, 2}}}}
	var ip gopacket.NetworkLayer
	if src.Is4() {
		ip = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, Id: 100, Flags: layers.IPv4DontFragment,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	} else {
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, FlowLabel: 7,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	}
	_ = tcp.SetNetworkLayerForChecksum(ip)
	return serialize(ip.(gopacket.SerializableLayer), tcp, gopacket.Payload(payload))
}

// UDP builds an IPv4 UDP packet from src:sport to dst:5201 with IP ID id, checksums
// computed.
func UDP(src, dst netip.Addr, sport uint16, id uint16, payload []byte) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, Id: id,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 5201}
	_ = udp.SetNetworkLayerForChecksum(ip)
	return serialize(ip, udp, gopacket.Payload(payload))
}

// IPv6 builds an IPv6 packet (payload length computed) of next header next around
// payload, which it takes as it is.
func IPv6(src, dst netip.Addr, hop uint8, next layers.IPProtocol, payload []byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: hop, NextHeader: next, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	return serialize(ip, gopacket.Payload(payload))
}

func serialize(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// Checksum is the Internet checksum of b, summed 16 bits at a time as RFC 1071
// describes it: the oracle for faster sums.
func Checksum(b []byte) uint16 {
	var ac uint32
	for ; len(b) >= 2; b = b[2:] {
		ac += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		ac += uint32(b[0]) << 8
	}
	for ac > 0xffff {
		ac = (ac & 0xffff) + (ac >> 16)
	}
	return ^uint16(ac)
}

// TCPChecksumOK verifies the TCP checksum of an IPv4 or IPv6 packet over the pseudo
// header, and an IPv6 packet's payload length.
func TCPChecksumOK(pkt []byte) bool {
	return l4ChecksumOK(pkt, 6, false)
}

// UDPChecksumOK verifies the UDP checksum of an IPv4 or IPv6 packet over the pseudo
// header, its UDP length, and an IPv6 packet's payload length.
func UDPChecksumOK(pkt []byte) bool {
	return l4ChecksumOK(pkt, 17, true)
}

func l4ChecksumOK(pkt []byte, proto byte, udp bool) bool {
	be := binary.BigEndian
	var pseudo []byte
	var l4 []byte
	if pkt[0]>>4 == 6 {
		if len(pkt) < 40 || int(be.Uint16(pkt[4:])) != len(pkt)-40 {
			return false
		}
		l4 = pkt[40:]
		pseudo = append(pseudo, pkt[8:40]...)
		pseudo = be.AppendUint32(pseudo, uint32(len(l4)))
		pseudo = append(pseudo, 0, 0, 0, proto)
	} else {
		ihl := int(pkt[0]&0x0f) * 4
		l4 = pkt[ihl:]
		pseudo = append(pseudo, pkt[12:20]...)
		pseudo = append(pseudo, 0, proto)
		pseudo = be.AppendUint16(pseudo, uint16(len(l4)))
	}
	if udp && (len(l4) < 8 || int(be.Uint16(l4[4:])) != len(l4)) {
		return false
	}
	return Checksum(append(pseudo, l4...)) == 0
}
