package lanlive_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lanlive"
)

func TestRoundTrip(t *testing.T) {
	for _, d := range []lanlive.Datagram{
		{Message: lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": 120 * time.Millisecond, "node-c.example.com": 0}},
			Boot: 0x1874c3d2a0b1c2d3, Seq: 42, To: "node-b", ToBoot: 0x1874c3d2a0b1c2d4},
		{Message: lanlive.Message{From: "node-a", Ages: map[string]time.Duration{}}, Boot: 1, Seq: 0, To: "node-b"},
		{Message: lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": time.Second}}, Legacy: true},
	} {
		got, err := lanlive.Decode(lanlive.Encode(d))
		assert.NilError(t, err)
		assert.DeepEqual(t, got, d)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, text := range map[string]string{
		"empty":          "",
		"other magic":    "eip-liveness 3\nnode-a 1 1\nnode-b 0\n",
		"no sender":      "eip-liveness 2\n",
		"spaced name":    "eip-liveness 1\nnode a\n",
		"no boot":        "eip-liveness 2\nnode-a\nnode-b 0\n",
		"zero boot":      "eip-liveness 2\nnode-a 0 1\nnode-b 0\n",
		"bad boot":       "eip-liveness 2\nnode-a xyz 1\nnode-b 0\n",
		"padded boot":    "eip-liveness 2\nnode-a 01 1\nnode-b 0\n",
		"bad counter":    "eip-liveness 2\nnode-a 1 -1\nnode-b 0\n",
		"no destination": "eip-liveness 2\nnode-a 1 1\n",
		"bad dest boot":  "eip-liveness 2\nnode-a 1 1\nnode-b\n",
		"bad age":        "eip-liveness 2\nnode-a 1 1\nnode-b 0\nnode-c soon\n",
		"negative age":   "eip-liveness 1\nnode-a\nnode-b -5\n",
		"no age":         "eip-liveness 1\nnode-a\nnode-b\n",
		"age too old":    "eip-liveness 1\nnode-a\nnode-b 3600001\n",
	} {
		_, err := lanlive.Decode([]byte(text))
		assert.Assert(t, err != nil, name)
	}
}

// FuzzDecode: whatever arrives, Decode returns an error or a datagram
// that encodes to bytes decoding to the same datagram.
func FuzzDecode(f *testing.F) {
	f.Add(lanlive.Encode(lanlive.Datagram{Message: lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": time.Second}}, Boot: 7, Seq: 3, To: "node-b", ToBoot: 9}))
	f.Add(lanlive.Encode(lanlive.Datagram{Message: lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-c": 0}}, Legacy: true}))
	f.Add([]byte("eip-liveness 2\nnode-a 1 1\nnode-b 0\nnode-c 1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := lanlive.Decode(b)
		if err != nil {
			return
		}
		again, err := lanlive.Decode(lanlive.Encode(d))
		assert.NilError(t, err)
		assert.DeepEqual(t, again, d)
	})
}

func testKey(s string) []byte { return bytes.Repeat([]byte(s), 32) }

// expect waits for the next datagram on out and returns it.
func expect(t *testing.T, out <-chan lanlive.Received) lanlive.Received {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no datagram arrived")
		return lanlive.Received{}
	}
}

// TestLoopback sends datagrams through real sockets on loopback: the
// first from a peer that has not heard us is a hello; once it has, they
// are signs of life.
func TestLoopback(t *testing.T) {
	out := make(chan lanlive.Received, 4)
	c := listen(t, "node-b", testKey("a"), out)
	peerOut := make(chan lanlive.Received, 4)
	peer := listen(t, "node-a", testKey("a"), peerOut)
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), c.Port())
	// Garbage first: it is dropped, the datagram after it arrives.
	raw, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	assert.NilError(t, err)
	defer raw.Close()
	_, err = raw.Write([]byte("hello"))
	assert.NilError(t, err)
	m := lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-c": time.Second}}
	assert.NilError(t, send(peer, "node-b", to, m))
	r := expect(t, out)
	assert.Equal(t, r.Source, netip.MustParseAddr("127.0.0.1"))
	assert.Equal(t, r.Port, peer.Port())
	assert.DeepEqual(t, r.Msg, m)
	assert.Equal(t, r.Kind, lanlive.Hello)

	assert.NilError(t, send(c, "node-a", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), peer.Port()), lanlive.Message{}))
	assert.Equal(t, expect(t, peerOut).Kind, lanlive.Live, "node-b heard node-a's process")
	assert.NilError(t, send(peer, "node-b", to, m))
	assert.Equal(t, expect(t, out).Kind, lanlive.Live)
}

// TestForgedDatagramsAreDropped: a datagram signed with another key, or
// changed after it was signed, never arrives and is counted; one signed
// with the shared key does.
func TestForgedDatagramsAreDropped(t *testing.T) {
	out := make(chan lanlive.Received, 4)
	keys, err := lanlive.NewKeyring(testKey("a"))
	assert.NilError(t, err)
	drops := &lanlive.Drops{}
	c, err := lanlive.Listen(lanlive.Options{Addr: netip.MustParseAddr("127.0.0.1"), Node: "node-a", Keys: keys, Drops: drops, SentBy: fromLoopback}, out)
	assert.NilError(t, err)
	defer c.Close()
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), c.Port())
	forged := lanlive.Message{From: "node-b", Ages: map[string]time.Duration{"node-a": time.Hour}}

	stranger := listen(t, "node-b", testKey("b"), make(chan lanlive.Received))
	assert.NilError(t, send(stranger, "node-a", to, forged))

	// A datagram of the right length whose signature does not match.
	raw, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	assert.NilError(t, err)
	defer raw.Close()
	_, err = raw.Write(append(bytes.Repeat([]byte{0}, 32), lanlive.Encode(lanlive.Datagram{Message: forged, Boot: 1, To: "node-a"})...))
	assert.NilError(t, err)

	peer := listen(t, "node-c", testKey("a"), make(chan lanlive.Received))
	real := lanlive.Message{From: "node-c", Ages: map[string]time.Duration{"node-a": 0}}
	assert.NilError(t, send(peer, "node-a", to, real))
	// Loopback keeps order: the forged datagrams, sent first, were dropped.
	assert.DeepEqual(t, expect(t, out).Msg, real)
	assert.Equal(t, drops.BadSignature.Load(), uint64(2))
}

func TestKeyringRefusesAShortKey(t *testing.T) {
	_, err := lanlive.NewKeyring([]byte("short"))
	assert.ErrorContains(t, err, "a key of 5 bytes, want at least 16")
	k, err := lanlive.NewKeyring(testKey("a"))
	assert.NilError(t, err)
	assert.ErrorContains(t, k.Set(testKey("b"), []byte("short")), "a key of 5 bytes")
}

// One message goes to every peer given; an address that cannot be sent
// to is named in the error and does not keep the others from theirs.
func TestSendToMany(t *testing.T) {
	key := testKey("a")
	var outs []<-chan lanlive.Received
	var to []lanlive.Peer
	for _, n := range []string{"node-b", "node-c", "node-d"} {
		out := make(chan lanlive.Received, 1)
		c := listen(t, n, key, out)
		outs = append(outs, out)
		to = append(to, lanlive.Peer{Node: n, Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), c.Port())})
	}
	bad := lanlive.Peer{Node: "node-e", Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)}
	to = append(to[:1], append([]lanlive.Peer{bad}, to[1:]...)...)
	sender := listen(t, "node-a", key, make(chan lanlive.Received))
	m := lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": 0}}
	err := sender.Send(to, m)
	assert.ErrorContains(t, err, bad.Addr.String())
	for _, out := range outs {
		assert.DeepEqual(t, expect(t, out).Msg, m)
	}
}
