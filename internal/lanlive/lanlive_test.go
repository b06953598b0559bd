package lanlive_test

import (
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
	c, err := lanlive.Listen(0, out)
	assert.NilError(t, err)
	defer c.Close()
	port := c.Port()
	m := lanlive.Message{From: "node-a", Ages: map[string]time.Duration{"node-b": time.Second}}
	// Garbage first: it is dropped, the datagram after it arrives.
	assert.NilError(t, c.Send(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), []byte("hello")))
	assert.NilError(t, c.Send(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), lanlive.Encode(m)))
	select {
	case r := <-out:
		assert.Equal(t, r.Source, netip.MustParseAddr("127.0.0.1"))
		assert.DeepEqual(t, r.Msg, m)
	case <-time.After(30 * time.Second):
		t.Fatal("no datagram arrived")
	}
}
