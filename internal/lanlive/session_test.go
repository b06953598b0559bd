package lanlive_test

import (
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lanlive"
)

// fromLoopback vouches for every sender on loopback, where the tests'
// nodes all live.
func fromLoopback(_ string, source netip.Addr) bool { return source.IsLoopback() }

// nodeAddrs vouches for a sender only from its Node's address, as the
// agent does from its Node informer.
type nodeAddrs map[string]netip.Addr

func (n nodeAddrs) sentBy(node string, source netip.Addr) bool {
	a, ok := n[node]
	return ok && a == source
}

var (
	bAddr   = netip.MustParseAddr("198.18.0.2")
	elsewhr = netip.MustParseAddr("198.18.0.99")
	now     = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	bBoot   = uint64(now.Add(-time.Hour).UnixNano())
)

func arrival(d lanlive.Datagram, from netip.Addr) lanlive.Arrival {
	return lanlive.Arrival{Datagram: d, Source: from, At: now, Key: 1}
}

// What a Session takes in, datagram after datagram, as node a whose boot
// is 100: b's process of boot 10 first says hello, then speaks once it
// heard a; replays, datagrams to another node and b's earlier process
// are dropped; b restarts (boot 20) and says hello again. Datagrams of
// the format before count until b spoke the current one.
func TestSessionAdmit(t *testing.T) {
	s := lanlive.NewSession("a", 100, nodeAddrs{"b": bAddr}.sentBy)
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
		kind, drop := s.Admit(arrival(c.d, bAddr))
		assert.Equal(t, drop, c.drop, "datagram %d", i)
		assert.Equal(t, kind, c.kind, "datagram %d", i)
	}
	// a's next datagram to b names b's latest boot.
	d := s.Seal("b", lanlive.Message{From: "whoever"})
	assert.DeepEqual(t, d, lanlive.Datagram{Message: lanlive.Message{From: "a"}, Boot: 100, Seq: 1, To: "b", ToBoot: 20})
	assert.Equal(t, s.Seal("c", lanlive.Message{}).ToBoot, uint64(0), "never heard c")
}

// b's genuine datagram, from its Node's address, naming a's boot.
func genuineB(seq uint64) lanlive.Datagram {
	return lanlive.Datagram{Message: lanlive.Message{From: "b"}, Boot: bBoot, Seq: seq, To: "a", ToBoot: 100}
}

// A datagram signed with the key but sent from an address that is not b's
// Node's (a compromised node, a leaked Secret) claims the largest boot and
// counter: it is dropped and leaves nothing behind, so b's own datagrams
// still count.
func TestSessionKeepsNothingOfAnUnprovenSource(t *testing.T) {
	s := lanlive.NewSession("a", 100, nodeAddrs{"b": bAddr}.sentBy)
	forged := lanlive.Datagram{Message: lanlive.Message{From: "b"}, Boot: math.MaxUint64, Seq: math.MaxUint64, To: "a", ToBoot: 100}
	_, drop := s.Admit(arrival(forged, elsewhr))
	assert.Equal(t, drop, lanlive.Unproven)
	kind, drop := s.Admit(arrival(genuineB(1), bAddr))
	assert.Equal(t, drop, lanlive.Kept)
	assert.Equal(t, kind, lanlive.Live)
}

// The same from b's own address (one on b's link forging its source): a
// boot beyond the clock, or a counter b could not have reached since its
// boot, is dropped and leaves nothing behind.
func TestSessionRefusesBootsAndCountersAheadOfTheClock(t *testing.T) {
	s := lanlive.NewSession("a", 100, nodeAddrs{"b": bAddr}.sentBy)
	for _, forged := range []lanlive.Datagram{
		{Message: lanlive.Message{From: "b"}, Boot: math.MaxUint64, Seq: 1, To: "a", ToBoot: 100},
		{Message: lanlive.Message{From: "b"}, Boot: uint64(now.Add(2 * time.Minute).UnixNano()), Seq: 1, To: "a", ToBoot: 100},
		{Message: lanlive.Message{From: "b"}, Boot: bBoot, Seq: math.MaxUint64, To: "a", ToBoot: 100},
		{Message: lanlive.Message{From: "b"}, Boot: bBoot, Seq: uint64(2 * time.Hour / time.Microsecond), To: "a", ToBoot: 100},
	} {
		_, drop := s.Admit(arrival(forged, bAddr))
		assert.Equal(t, drop, lanlive.Implausible, "boot %x counter %d", forged.Boot, forged.Seq)
	}
	kind, drop := s.Admit(arrival(genuineB(1), bAddr))
	assert.Equal(t, drop, lanlive.Kept)
	assert.Equal(t, kind, lanlive.Live)
}

// What a key wrote goes once the key is no longer accepted: a datagram
// signed with a leaked key (serial 2), with a boot just within the clock,
// makes b's genuine ones stale until the key is rotated out.
func TestSessionForgetsWhatARotatedOutKeyWrote(t *testing.T) {
	s := lanlive.NewSession("a", 100, nodeAddrs{"b": bAddr}.sentBy)
	forged := lanlive.Arrival{Datagram: genuineB(1), Source: bAddr, At: now, Key: 2}
	forged.Boot = uint64(now.Add(30 * time.Second).UnixNano())
	_, drop := s.Admit(forged)
	assert.Equal(t, drop, lanlive.Kept)
	_, drop = s.Admit(arrival(genuineB(1), bAddr))
	assert.Equal(t, drop, lanlive.Stale, "the forgery holds while its key is accepted")
	s.Retain(func(key uint64) bool { return key == 1 })
	kind, drop := s.Admit(arrival(genuineB(2), bAddr))
	assert.Equal(t, drop, lanlive.Kept)
	assert.Equal(t, kind, lanlive.Live)
	// What the accepted key wrote stays: a replay is still stale.
	s.Retain(func(key uint64) bool { return key == 1 })
	_, drop = s.Admit(arrival(genuineB(2), bAddr))
	assert.Equal(t, drop, lanlive.Stale)
}

// A full table of senders makes room for a new node by evicting those
// that are no longer Nodes (or no longer at that address), rather than
// refusing it; only a table full of Nodes refuses one.
func TestSessionEvictsSendersThatAreNotNodes(t *testing.T) {
	nodes := nodeAddrs{}
	s := lanlive.NewSession("a", 100, nodes.sentBy)
	const many = 8192
	for i := range many {
		name := fmt.Sprintf("n%d", i)
		nodes[name] = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		d := lanlive.Datagram{Message: lanlive.Message{From: name}, Boot: bBoot, Seq: 1, To: "a"}
		_, drop := s.Admit(arrival(d, nodes[name]))
		assert.Equal(t, drop, lanlive.Kept, name)
	}
	nodes["b"] = bAddr
	_, drop := s.Admit(arrival(genuineB(1), bAddr))
	assert.Equal(t, drop, lanlive.Full, "every sender is still a Node")
	delete(nodes, "n7")
	kind, drop := s.Admit(arrival(genuineB(2), bAddr))
	assert.Equal(t, drop, lanlive.Kept)
	assert.Equal(t, kind, lanlive.Live)
}
