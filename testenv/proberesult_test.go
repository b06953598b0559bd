package testenv

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func testMAC(b byte) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, b} }

// result builds a probe result from (seq, MAC) replies, each arriving
// 10 ms × seq after the start.
func result(sent int, replies ...any) ProbeResult {
	t0 := time.Unix(1000, 0)
	r := ProbeResult{Interval: 10 * time.Millisecond, Start: t0, End: t0.Add(time.Duration(sent) * 10 * time.Millisecond), Sent: sent}
	for i := 0; i < len(replies); i += 2 {
		seq := replies[i].(int)
		r.Replies = append(r.Replies, Reply{At: t0.Add(time.Duration(seq)*10*time.Millisecond + time.Millisecond), Seq: seq, MAC: replies[i+1].(net.HardwareAddr)})
	}
	return r
}

func TestLongestGap(t *testing.T) {
	macA, macB := testMAC(0xa), testMAC(0xb)
	for _, tc := range []struct {
		name string
		r    ProbeResult
		want time.Duration
	}{
		{"no replies is the whole probe", result(10), 100 * time.Millisecond},
		{"steady replies", result(4, 0, macA, 1, macA, 2, macA, 3, macA), 10 * time.Millisecond},
		{"gap in the middle", result(6, 0, macA, 1, macA, 5, macB), 40 * time.Millisecond},
		{"silent end", result(10, 0, macA, 1, macA), 89 * time.Millisecond},
		{"silent start", result(10, 7, macA, 8, macA, 9, macA), 71 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.r.LongestGap().Duration(), tc.want)
		})
	}
}

func TestLostAndMACs(t *testing.T) {
	macA, macB := testMAC(0xa), testMAC(0xb)
	r := result(6, 0, macA, 1, macA, 1, macA, 4, macB, 5, macB)
	assert.Equal(t, r.Lost(), 2)
	assert.DeepEqual(t, r.MACs(), []net.HardwareAddr{macA, macB})
	assert.DeepEqual(t, r.LastMAC(), macB)
	assert.Assert(t, result(3).LastMAC() == nil)
}

func TestOverlaps(t *testing.T) {
	macA, macB := testMAC(0xa), testMAC(0xb)
	for _, tc := range []struct {
		name string
		r    ProbeResult
		want []Overlap
	}{
		{"one MAC", result(3, 0, macA, 1, macA, 2, macA), nil},
		{"clean move", result(4, 0, macA, 1, macA, 2, macB, 3, macB), nil},
		{"move with a gap", result(6, 0, macA, 4, macB, 5, macB), nil},
		{"one request answered by both", result(4, 0, macA, 1, macA, 1, macB, 2, macB), []Overlap{
			{MACs: [2]net.HardwareAddr{macA, macB}, FirstSeq: 1, LastSeq: 1},
		}},
		{"alternating", result(5, 0, macA, 1, macB, 2, macA, 3, macB, 4, macB), []Overlap{
			{MACs: [2]net.HardwareAddr{macA, macB}, FirstSeq: 1, LastSeq: 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.r.Overlaps()
			assert.Equal(t, len(got), len(tc.want), "%v", got)
			for i := range got {
				assert.DeepEqual(t, got[i].MACs, tc.want[i].MACs)
				assert.Equal(t, got[i].FirstSeq, tc.want[i].FirstSeq)
				assert.Equal(t, got[i].LastSeq, tc.want[i].LastSeq)
				assert.Assert(t, !got[i].From.After(got[i].To))
			}
		})
	}
}

func TestParseEchoReply(t *testing.T) {
	macA := testMAC(0xa)
	v4 := netip.MustParseAddr("198.18.100.1")
	v6 := netip.MustParseAddr("2001:db8::100:1")
	frame := func(src netip.Addr, icmpType byte, id, seq uint16) []byte {
		b := make([]byte, 14)
		copy(b[6:12], macA)
		icmp := []byte{icmpType, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(icmp[4:], id)
		binary.BigEndian.PutUint16(icmp[6:], seq)
		if src.Is4() {
			binary.BigEndian.PutUint16(b[12:], etherTypeIPv4)
			ip := make([]byte, 20)
			ip[0], ip[9] = 0x45, 1
			copy(ip[12:16], src.AsSlice())
			return append(append(b, ip...), icmp...)
		}
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv6)
		ip := make([]byte, 40)
		ip[0], ip[6] = 0x60, 58
		copy(ip[8:24], src.AsSlice())
		return append(append(b, ip...), icmp...)
	}
	for _, tc := range []struct {
		name   string
		frame  []byte
		target netip.Addr
		ok     bool
	}{
		{"IPv4 reply", frame(v4, 0, 7, 300), v4, true},
		{"IPv6 reply", frame(v6, 129, 7, 300), v6, true},
		{"IPv4 request", frame(v4, 8, 7, 300), v4, false},
		{"IPv6 request", frame(v6, 128, 7, 300), v6, false},
		{"other id", frame(v4, 0, 8, 300), v4, false},
		{"other source", frame(netip.MustParseAddr("198.18.100.2"), 0, 7, 300), v4, false},
		{"other family", frame(v6, 129, 7, 300), v4, false},
		{"truncated", frame(v4, 0, 7, 300)[:30], v4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mac, seq, ok := parseEchoReply(tc.frame, tc.target, 7)
			assert.Equal(t, ok, tc.ok)
			if ok {
				assert.DeepEqual(t, mac, macA)
				assert.Equal(t, seq, uint16(300))
			}
		})
	}
}

func TestServiceIP(t *testing.T) {
	assert.Equal(t, ServiceIP(1).String(), "198.18.100.1")
	assert.Equal(t, ServiceIP(1000).String(), "198.18.103.232")
	assert.Equal(t, ServiceIPv6(1).String(), "2001:db8::100:1")
	assert.Equal(t, ServiceIPv6(1000).String(), "2001:db8::100:3e8")
	v4, v6 := LANPrefixes()
	assert.Assert(t, v4.Contains(ServiceIP(1000)) && v6.Contains(ServiceIPv6(1000)))
}
