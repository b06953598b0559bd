package lanlive_test

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
)

// The timings of the agent at a 2 s lease duration and a 500 ms renew
// interval: the LAN tail is two renew intervals, suspect a second and
// fence-after 1.5 s.
const (
	renew    = 500 * time.Millisecond
	duration = 2 * time.Second
	fence    = 1500 * time.Millisecond
)

func at(d time.Duration) time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(d) }

// wire is three eipds on loopback, as the LAN would carry them: self (the
// receiver, judging with a lease.Liveness), b, and c. Every datagram to
// self passes through the test, which keeps a copy, as an attacker on the
// LAN sees every datagram; rx is what self's socket delivered.
type wire struct {
	t        *testing.T
	self, b  *lanlive.Conn
	c        *net.UDPConn // node c: the test reads what b sends it
	selfAddr netip.AddrPort
	tap      *net.UDPConn // where b's datagrams to self go first
	attacker *net.UDPConn
	bRx      chan lanlive.Received
	marker   *lanlive.Conn
	markerRx chan lanlive.Received
	rx       chan lanlive.Received
	live     *lease.Liveness
}

func newWire(t *testing.T) *wire {
	w := &wire{t: t, rx: make(chan lanlive.Received, 16), live: lease.NewLiveness("self", renew, 2*renew)}
	w.self = listen(t, "self", testKey("a"), w.rx)
	w.selfAddr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), w.self.Port())
	w.bRx = make(chan lanlive.Received, 16)
	w.b = listen(t, "b", testKey("a"), w.bRx)
	w.markerRx = make(chan lanlive.Received, 16)
	w.marker = listen(t, "marker", testKey("a"), w.markerRx)
	var err error
	for _, c := range []**net.UDPConn{&w.c, &w.tap, &w.attacker} {
		*c, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		assert.NilError(t, err)
		t.Cleanup(func() { _ = (*c).Close() })
	}
	w.live.SetLAN(duration, 2*renew, 4*renew, time.Second)
	w.live.Sending(at(0))
	for _, n := range []string{"self", "b", "c", "marker"} {
		w.live.Observe(lease.Heartbeat{Node: n, Duration: 20 * time.Second, LivenessPort: 9403, Version: strconv.Itoa(1)}, at(0))
	}
	return w
}

// listen opens a Conn of node on loopback, on a port of its own.
func listen(t *testing.T, node string, key []byte, out chan<- lanlive.Received) *lanlive.Conn {
	t.Helper()
	keys, err := lanlive.NewKeyring(key)
	assert.NilError(t, err)
	c, err := lanlive.Listen(lanlive.Options{Addr: netip.MustParseAddr("127.0.0.1"), Node: node, Keys: keys, SentBy: fromLoopback}, out)
	assert.NilError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort {
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// read returns the next datagram c gets.
func (w *wire) read(c *net.UDPConn) []byte {
	w.t.Helper()
	buf := make([]byte, lanlive.MaxSize)
	assert.NilError(w.t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	n, err := c.Read(buf)
	assert.NilError(w.t, err)
	return buf[:n]
}

// genuine has b send m to self at d, through the tap: it returns the bytes
// the attacker saw, and self takes in what arrived.
func (w *wire) genuine(d time.Duration, m lanlive.Message) []byte {
	w.t.Helper()
	assert.NilError(w.t, send(w.b, "self", addrOf(w.tap), m))
	b := w.read(w.tap)
	w.replay(d, b)
	return b
}

// replay resends b to self from the attacker's socket at d; self takes in
// whatever its socket delivered. A datagram of the marker node follows
// the replay: loopback keeps order, so once it arrives self has decided
// on the replay.
func (w *wire) replay(d time.Duration, b []byte) {
	w.t.Helper()
	if b != nil {
		_, err := w.attacker.WriteToUDPAddrPort(b, w.selfAddr)
		assert.NilError(w.t, err)
	}
	assert.NilError(w.t, send(w.marker, "self", w.selfAddr, lanlive.Message{From: "marker", Ages: map[string]time.Duration{"self": 0}}))
	for {
		select {
		case r := <-w.rx:
			if r.Kind == lanlive.Live {
				w.live.Datagram(r.Msg.From, r.Msg.Ages, at(d))
			}
			if r.Msg.From == "marker" {
				return
			}
		case <-time.After(30 * time.Second):
			w.t.Fatal("the marker datagram did not arrive")
		}
	}
}

// Two replays, 300 ms apart, of b's genuine datagram to c, which does not
// list self, must not make self unheard: an unheard node hands every IP
// it holds to its peers. (Replayed to self they read as b's reports that
// it no longer hears self, confirmed by a second: self judged itself
// unheard at 1.5 s and gave its IPs away.)
func TestReplayToAnotherNodeIsDropped(t *testing.T) {
	w := newWire(t)
	handshake(w)
	for d := time.Duration(0); d <= time.Second; d += renew {
		w.genuine(d, lanlive.Message{From: "b", Ages: map[string]time.Duration{"self": 100 * time.Millisecond, "c": 0}})
	}
	assert.NilError(t, send(w.b, "c", addrOf(w.c), lanlive.Message{From: "b", Ages: map[string]time.Duration{"c": 0}}))
	toC := w.read(w.c)
	w.replay(1200*time.Millisecond, toC)
	w.replay(1500*time.Millisecond, toC)
	un, _ := w.live.Unheard(at(1500*time.Millisecond), fence)
	assert.Assert(t, !un, "replays of a datagram to c made self unheard")
}

// b dies at 1 s. Replays of its datagrams to self, captured before, must
// not keep it alive: it is dead a lease duration after its last genuine
// datagram. (They kept it alive as long as they came.)
func TestReplayOfADeadNodeIsDropped(t *testing.T) {
	w := newWire(t)
	handshake(w)
	var captured [][]byte
	for d := time.Duration(0); d <= time.Second; d += renew {
		captured = append(captured, w.genuine(d, lanlive.Message{From: "b", Ages: map[string]time.Duration{"self": 100 * time.Millisecond}}))
	}
	for i, d := 0, time.Second+250*time.Millisecond; d <= 4*time.Second; i, d = i+1, d+250*time.Millisecond {
		w.replay(d, captured[i%len(captured)])
	}
	assert.Assert(t, w.live.Alive("b", at(3*time.Second-time.Millisecond)))
	assert.Assert(t, !w.live.Alive("b", at(3*time.Second)), "replays kept a dead node alive")
}

func send(c *lanlive.Conn, node string, to netip.AddrPort, m lanlive.Message) error {
	return c.Send([]lanlive.Peer{{Node: node, Addr: to}}, m)
}

// handshake has self greet b and the marker, so that their datagrams to
// self name self's boot and count: the marker's keep self's LAN
// connected.
func handshake(w *wire) {
	w.t.Helper()
	bAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), w.b.Port())
	assert.NilError(w.t, send(w.self, "b", bAddr, lanlive.Message{From: "self"}))
	expect(w.t, w.bRx)
	assert.NilError(w.t, send(w.self, "marker", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), w.marker.Port()), lanlive.Message{}))
	expect(w.t, w.markerRx)
	// b tells self its boot; then self's marker does.
	assert.NilError(w.t, send(w.b, "self", w.selfAddr, lanlive.Message{From: "b"}))
	w.replay(0, nil)
}
