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
	m := lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": 120 * time.Millisecond, "node-c.example.com": 0}}
	got, err := lanlive.Decode(lanlive.Encode(m))
	assert.NilError(t, err)
	assert.DeepEqual(t, got, m)
}

func TestDecodeRejects(t *testing.T) {
	for name, text := range map[string]string{
		"empty":        "",
		"other magic":  "eip-liveness 2\nnode-a\n",
		"no sender":    "eip-liveness 1\n",
		"spaced name":  "eip-liveness 1\nnode a\n",
		"bad age":      "eip-liveness 1\nnode-a\nnode-b soon\n",
		"negative age": "eip-liveness 1\nnode-a\nnode-b -5\n",
		"no age":       "eip-liveness 1\nnode-a\nnode-b\n",
		"age too old":  "eip-liveness 1\nnode-a\nnode-b 3600001\n",
	} {
		_, err := lanlive.Decode([]byte(text))
		assert.Assert(t, err != nil, name)
	}
}

// TestLoopback sends a datagram through a real socket on loopback.
func TestLoopback(t *testing.T) {
	out := make(chan lanlive.Received, 4)
	c, err := lanlive.Listen(0, testKey("a"), out)
	assert.NilError(t, err)
	defer c.Close()
	port := c.Port()
	m := lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": time.Second}}
	// Garbage first: it is dropped, the datagram after it arrives.
	to := []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}
	assert.NilError(t, c.Send(to, []byte("hello")))
	assert.NilError(t, c.Send(to, lanlive.Encode(m)))
	select {
	case r := <-out:
		assert.Equal(t, r.Source, netip.MustParseAddr("127.0.0.1"))
		assert.DeepEqual(t, r.Msg, m)
	case <-time.After(30 * time.Second):
		t.Fatal("no datagram arrived")
	}
}

func testKey(s string) []byte { return bytes.Repeat([]byte(s), 32) }

// TestForgedDatagramsAreDropped: a datagram signed with another key, or
// changed after it was signed, never arrives; one signed with the shared
// key does.
func TestForgedDatagramsAreDropped(t *testing.T) {
	out := make(chan lanlive.Received, 4)
	c, err := lanlive.Listen(0, testKey("a"), out)
	assert.NilError(t, err)
	defer c.Close()
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), c.Port())
	forged := lanlive.Message{From: "node-b", Ages: map[string]time.Duration{"node-a": time.Hour}}

	stranger, err := lanlive.Listen(0, testKey("b"), make(chan lanlive.Received))
	assert.NilError(t, err)
	defer stranger.Close()
	assert.NilError(t, stranger.Send([]netip.AddrPort{to}, lanlive.Encode(forged)))

	// A datagram of the right length whose signature does not match.
	raw, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	assert.NilError(t, err)
	defer raw.Close()
	_, err = raw.Write(append(bytes.Repeat([]byte{0}, 32), lanlive.Encode(forged)...))
	assert.NilError(t, err)

	peer, err := lanlive.Listen(0, testKey("a"), make(chan lanlive.Received))
	assert.NilError(t, err)
	defer peer.Close()
	real := lanlive.Message{From: "node-c", Ages: map[string]time.Duration{"node-a": 0}}
	assert.NilError(t, peer.Send([]netip.AddrPort{to}, lanlive.Encode(real)))
	select {
	case r := <-out:
		// Loopback keeps order: the forged datagrams, sent first, were dropped.
		assert.DeepEqual(t, r.Msg, real)
	case <-time.After(30 * time.Second):
		t.Fatal("the signed datagram did not arrive")
	}
	select {
	case r := <-out:
		t.Fatalf("a second datagram arrived: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestListenRefusesAShortKey(t *testing.T) {
	_, err := lanlive.Listen(0, []byte("short"), make(chan lanlive.Received))
	assert.ErrorContains(t, err, "a key of 5 bytes, want at least 16")
}

// One message goes to every address given; an address that cannot be sent
// to is named in the error and does not keep the others from theirs.
func TestSendToMany(t *testing.T) {
	key := testKey("a")
	var peers []<-chan lanlive.Received
	var to []netip.AddrPort
	for range 3 {
		out := make(chan lanlive.Received, 1)
		c, err := lanlive.Listen(0, key, out)
		assert.NilError(t, err)
		defer c.Close()
		peers = append(peers, out)
		to = append(to, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), c.Port()))
	}
	bad := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)
	to = append(to[:1], append([]netip.AddrPort{bad}, to[1:]...)...)
	sender, err := lanlive.Listen(0, key, make(chan lanlive.Received))
	assert.NilError(t, err)
	defer sender.Close()
	m := lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": 0}}
	err = sender.Send(to, lanlive.Encode(m))
	assert.ErrorContains(t, err, bad.String())
	for _, out := range peers {
		select {
		case r := <-out:
			assert.DeepEqual(t, r.Msg, m)
		case <-time.After(30 * time.Second):
			t.Fatal("a peer got no datagram")
		}
	}
}
