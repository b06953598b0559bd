package lanlive

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// A Conn forgets what a key wrote once the Keyring no longer accepts it:
// a datagram signed with a leaked key, claiming b with a boot just within
// the clock, makes b's genuine datagrams stale only until the key is
// rotated out.
func TestConnForgetsWhatARotatedOutKeyWrote(t *testing.T) {
	good, leaked := key("g"), key("l")
	ring, err := NewKeyring(good, leaked)
	assert.NilError(t, err)
	rx := make(chan Received, 8)
	loopback := func(_ string, a netip.Addr) bool { return a.IsLoopback() }
	c, err := Listen(Options{Addr: netip.MustParseAddr("127.0.0.1"), Node: "self", Keys: ring, SentBy: loopback}, rx)
	assert.NilError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	assert.NilError(t, err)
	t.Cleanup(func() { _ = u.Close() })
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), c.Port())
	send := func(k []byte, from string, boot, seq uint64) {
		t.Helper()
		_, err := u.WriteToUDPAddrPort(sign(k, Encode(Datagram{Message: Message{From: from}, Boot: boot, Seq: seq, To: "self"})), to)
		assert.NilError(t, err)
	}
	next := func() string {
		t.Helper()
		select {
		case r := <-rx:
			return r.Msg.From
		case <-time.After(time.Minute):
			t.Fatal("nothing arrived")
			return ""
		}
	}
	now := time.Now()
	send(leaked, "b", uint64(now.Add(30*time.Second).UnixNano()), 1)
	assert.Equal(t, next(), "b", "the forgery is taken in while its key is accepted")
	bBoot := uint64(now.Add(-time.Hour).UnixNano())
	send(good, "b", bBoot, 1)
	send(good, "marker", bBoot, 1)
	assert.Equal(t, next(), "marker", "b's genuine datagram is stale behind the forgery")
	assert.NilError(t, ring.Set(good))
	send(good, "b", bBoot, 2)
	assert.Equal(t, next(), "b", "the leaked key rotated out, b counts again")
}
