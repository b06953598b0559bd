package lanlive_test

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lanlive"
)

// What a Session takes in, datagram after datagram, as node a whose boot
// is 100: b's process of boot 10 first says hello, then speaks once it
// heard a; replays, datagrams to another node and b's earlier process
// are dropped; b restarts (boot 20) and says hello again. Datagrams of
// the format before count until b spoke the current one.
func TestSessionAdmit(t *testing.T) {
	s := lanlive.NewSession("a", 100)
	dg := func(boot, seq uint64, to string, toBoot uint64) lanlive.Datagram {
		return lanlive.Datagram{Message: lanlive.Message{From: "b"}, Boot: boot, Seq: seq, To: to, ToBoot: toBoot}
	}
	legacy := lanlive.Datagram{Message: lanlive.Message{From: "b"}, Legacy: true}
	for i, c := range []struct {
		d    lanlive.Datagram
		kind lanlive.Kind
		drop lanlive.Drop
	}{
		{legacy, lanlive.Legacy, lanlive.Kept},
		{dg(10, 1, "a", 0), lanlive.Hello, lanlive.Kept},
		{legacy, 0, lanlive.Stale},
		{dg(10, 1, "a", 0), 0, lanlive.Stale},
		{dg(10, 2, "c", 100), 0, lanlive.Misaddressed},
		{dg(10, 3, "a", 99), lanlive.Hello, lanlive.Kept}, // to a's earlier process
		{dg(10, 5, "a", 100), lanlive.Live, lanlive.Kept},
		{dg(10, 4, "a", 100), 0, lanlive.Stale}, // late, or replayed
		{dg(10, 5, "a", 100), 0, lanlive.Stale},
		{dg(10, 6, "a", 100), lanlive.Live, lanlive.Kept},
		{dg(20, 1, "a", 0), lanlive.Hello, lanlive.Kept},
		{dg(10, 7, "a", 100), 0, lanlive.Stale}, // b's earlier process
		{dg(20, 2, "a", 100), lanlive.Live, lanlive.Kept},
	} {
		kind, drop := s.Admit(c.d)
		assert.Equal(t, drop, c.drop, "datagram %d", i)
		assert.Equal(t, kind, c.kind, "datagram %d", i)
	}
	// a's next datagram to b names b's latest boot.
	d := s.Seal("b", lanlive.Message{From: "whoever"})
	assert.DeepEqual(t, d, lanlive.Datagram{Message: lanlive.Message{From: "a"}, Boot: 100, Seq: 1, To: "b", ToBoot: 20})
	assert.Equal(t, s.Seal("c", lanlive.Message{}).ToBoot, uint64(0), "never heard c")
}
