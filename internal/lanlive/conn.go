package lanlive

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// What counts (docs/design.md, Replayed datagrams). A datagram is taken
// in only when it is signed with a key of the Keyring, names this node as
// its destination, comes from an address of the Node it names as its
// sender, carries a boot and counter this node's clock allows, and is
// newer than every datagram taken in from its sender: a larger boot, or
// the same boot and a larger counter. Nothing of a sender is kept before
// all but the last hold, so a datagram signed with a stolen key but sent
// from elsewhere, or from the future, leaves no trace; and what a key
// wrote is forgotten once the key is no longer accepted. A replay
// of a datagram to another node, or of one this process already had, or of
// one of an earlier process of the sender, is dropped. A datagram counts
// as a sign of life (Live) only when it also names this process's boot:
// its sender heard this process, so it was sent after this process
// started; one that does not (Hello: its sender has not heard this process
// yet, or is replayed from before it started) only tells this process the
// sender's boot, and is answered. A sign of life therefore always comes
// from a datagram sent during this process's life, and at most once.

// Kind says what a datagram taken in proves.
type Kind int

const (
	// Live is a sign of life of its sender: see above.
	Live Kind = iota
	// Hello is a fresh datagram whose sender has not heard this process
	// yet: answer it, do not count it.
	Hello
	// Legacy is a datagram of the format before, which carries no boot,
	// counter or destination: it counts only from a node that does not
	// speak the current format (its heartbeat says so; the caller checks),
	// and never from a sender this process heard in the current format.
	Legacy
)

// maxSenders bounds the senders whose boot and counter a Session keeps. A
// sender enters only from an address of the Node it names, so the table
// holds Nodes; one whose Node is gone, or no longer has that address,
// makes room for a new one (Admit). Kubernetes supports 5,000 nodes.
const maxSenders = 8192

// maxSkew is how far ahead of this node's clock a sender's boot (its start
// time) may be: nodes' clocks agree within it. A boot further ahead, or a
// counter larger than a sender could have reached since its boot (one
// datagram a microsecond), cannot be genuine: taken in, it would make
// every later datagram of that sender look stale.
const maxSkew = time.Minute

// Received is a datagram as it arrived.
type Received struct {
	Source netip.Addr // the sender's address, IPv4 unmapped
	Port   uint16     // the sender's port: its liveness port
	Msg    Message
	Kind   Kind
}

// Peer is where a datagram goes: a node, the address where it hears
// datagrams, and whether it speaks only the format before (Legacy: its
// heartbeat does not name the current format), which then gets both.
type Peer struct {
	Node   string
	Addr   netip.AddrPort
	Legacy bool
}

// Drops counts the datagrams dropped, by reason, over every Conn that
// shares it (one a process: the liveness socket is opened again when the
// port changes). Safe for concurrent use.
type Drops struct {
	// BadSignature: signed with no key of the Keyring, or not signed: a
	// node on another key (a rotation not followed), or a forgery.
	BadSignature atomic.Uint64
	// Stale: a replay, not newer than what its sender sent before.
	Stale atomic.Uint64
	// Misaddressed: addressed to another node.
	Misaddressed atomic.Uint64
	// Unproven: from an address that is not one of the Node it names.
	Unproven atomic.Uint64
	// Implausible: a boot or counter ahead of this node's clock.
	Implausible atomic.Uint64
}

// of is the counter of the drops for reason d, nil if none counts them.
func (d *Drops) of(reason Drop) *atomic.Uint64 {
	switch reason {
	case Stale:
		return &d.Stale
	case Misaddressed:
		return &d.Misaddressed
	case Unproven:
		return &d.Unproven
	case Implausible:
		return &d.Implausible
	}
	return nil
}

// Session is the freshness of one process's datagrams: its boot and
// counter, and the newest boot and counter taken in from each sender (see
// the top of this file). A Conn keeps one; it is apart so that a
// simulation of many nodes runs it without sockets. Safe for concurrent
// use.
type Session struct {
	self   string
	boot   uint64
	sentBy SentBy

	mu      sync.Mutex
	seq     uint64
	senders map[string]*sender
}

// SentBy reports whether source is an address of the Node named node: only
// then is a datagram naming node as its sender taken in. A key alone
// proves little: whoever holds it (a compromised node, a leaked Secret)
// could speak for every node.
type SentBy func(node string, source netip.Addr) bool

// sender is the newest boot and counter this process took in from a node,
// the address that datagram came from and the serial number of the key
// that signed it (Keyring).
type sender struct {
	boot, seq uint64
	source    netip.Addr
	key       uint64
}

// NewSession returns the Session of the process of node whose boot is
// boot (nonzero; a later process of the same node has a larger one),
// which takes in only what sentBy vouches for.
func NewSession(node string, boot uint64, sentBy SentBy) *Session {
	return &Session{self: node, boot: boot, sentBy: sentBy, senders: map[string]*sender{}}
}

// Seal returns m as the next datagram from this process to node: from
// this node whatever m.From says, with the boot of node's process that
// this one last took a datagram from (0: none yet).
func (s *Session) Seal(node string, m Message) Datagram {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	m.From = s.self
	d := Datagram{Message: m, Boot: s.boot, Seq: s.seq, To: node}
	if p := s.senders[node]; p != nil {
		d.ToBoot = p.boot
	}
	return d
}

// Drop is why Admit drops a datagram.
type Drop int

const (
	Kept Drop = iota
	// Stale: not newer than what its sender sent before (a replay), or
	// of the format before from a sender heard in the current one.
	Stale
	// Misaddressed: addressed to another node.
	Misaddressed
	// Full: from a sender beyond the maxSenders this process keeps, all
	// of them still Nodes.
	Full
	// Unproven: from an address that is not one of the Node it names.
	Unproven
	// Implausible: its boot or counter is further ahead than this
	// node's clock allows (maxSkew).
	Implausible
)

// Arrival is an authentic datagram as it arrived: from where, when, and
// the serial number of the key that signed it (Keyring).
type Arrival struct {
	Datagram
	Source netip.Addr
	At     time.Time
	Key    uint64
}

// Admit decides on an authentic datagram: whether it is taken in, and as
// what, or why not. Nothing of a sender is written before its source is
// proven and its boot and counter found plausible.
func (s *Session) Admit(a Arrival) (Kind, Drop) {
	d := a.Datagram
	if !d.Legacy && d.To != s.self {
		return 0, Misaddressed
	}
	if !s.sentBy(d.From, a.Source) {
		return 0, Unproven
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.senders[d.From]
	if d.Legacy {
		// A sender heard in the current format never sends the old one.
		if p != nil {
			return 0, Stale
		}
		return Legacy, Kept
	}
	if !plausible(d.Boot, d.Seq, a.At) {
		return 0, Implausible
	}
	if p == nil {
		if len(s.senders) >= maxSenders {
			s.evict()
		}
		if len(s.senders) >= maxSenders {
			return 0, Full
		}
		p = &sender{}
		s.senders[d.From] = p
	}
	if d.Boot < p.boot || d.Boot == p.boot && d.Seq <= p.seq {
		return 0, Stale
	}
	*p = sender{boot: d.Boot, seq: d.Seq, source: a.Source, key: a.Key}
	if d.ToBoot != s.boot {
		return Hello, Kept
	}
	return Live, Kept
}

// plausible reports whether a sender may have started at boot (Unix
// nanoseconds) and sent seq datagrams by now, on a clock within maxSkew
// of this node's.
func plausible(boot, seq uint64, now time.Time) bool {
	limit := now.Add(maxSkew).UnixNano()
	if limit <= 0 || boot > uint64(limit) {
		return false
	}
	return seq <= (uint64(limit)-boot)/uint64(time.Microsecond)
}

// evict forgets the senders that are no longer Nodes with the address
// their last datagram came from. Called with mu held.
func (s *Session) evict() {
	for n, p := range s.senders {
		if !s.sentBy(n, p.source) {
			delete(s.senders, n)
		}
	}
}

// Retain forgets every sender whose last datagram was signed with a key
// that accepted no longer accepts: what a leaked key wrote goes with it
// once the key is rotated out, and its datagrams are refused from then on.
func (s *Session) Retain(accepted func(key uint64) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, p := range s.senders {
		if !accepted(p.key) {
			delete(s.senders, n)
		}
	}
}

// Conn is a UDP socket that signs what it sends and takes in only what is
// signed with a key of its Keyring and fresh (see above).
type Conn struct {
	udp   *net.UDPConn
	keys  *Keyring
	drops *Drops
	clk   clock.PassiveClock
	s     *Session
}

// Options say where a Conn listens and as whom.
type Options struct {
	// Addr is the address to bind; the zero Addr binds every address of
	// the host (IPv4 and IPv6).
	Addr netip.Addr
	Port uint16
	// Node is this node's name: datagrams to another are dropped.
	Node string
	Keys *Keyring
	// Boot identifies this process; zero takes the time now.
	Boot uint64
	// Drops counts what is dropped; nil counts nowhere.
	Drops *Drops
	// SentBy vouches for the sender of each datagram (Session).
	SentBy SentBy
	// Clock dates arrivals; nil is the real clock.
	Clock clock.PassiveClock
}

// Listen binds the port and delivers each datagram taken in to out until
// Close; out is dropped to when full, as a lost datagram is. Binding a
// port from 1024 up needs no privilege.
func Listen(o Options, out chan<- Received) (*Conn, error) {
	if o.Keys == nil || !validName(o.Node) || o.SentBy == nil {
		return nil, errors.New("liveness over the LAN: no key, no node name or no check of senders")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Boot == 0 {
		o.Boot = uint64(o.Clock.Now().UnixNano())
	}
	if o.Drops == nil {
		o.Drops = &Drops{}
	}
	at := &net.UDPAddr{Port: int(o.Port)}
	if o.Addr.IsValid() {
		at = net.UDPAddrFromAddrPort(netip.AddrPortFrom(o.Addr, o.Port))
	}
	udp, err := net.ListenUDP("udp", at)
	if err != nil {
		return nil, fmt.Errorf("liveness over the LAN: listen on UDP %s: %w", at, err)
	}
	c := &Conn{udp: udp, keys: o.Keys, drops: o.Drops, clk: o.Clock, s: NewSession(o.Node, o.Boot, o.SentBy)}
	go c.read(out)
	return c, nil
}

// read delivers what arrives until Close. With fifty nodes a node checks
// a hundred datagrams a second.
func (c *Conn) read(out chan<- Received) {
	buf := make([]byte, MaxSize)
	gen := c.keys.generation()
	for {
		n, from, err := c.udp.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		if g := c.keys.generation(); g != gen {
			gen = g
			c.s.Retain(c.keys.accepts)
		}
		var key uint64
		if n >= sha256.Size {
			key = c.keys.verify(buf[:sha256.Size], buf[sha256.Size:n])
		}
		if key == 0 {
			c.drops.BadSignature.Add(1)
			continue
		}
		d, err := Decode(buf[sha256.Size:n])
		if err != nil {
			continue
		}
		source := from.Addr().Unmap()
		kind, drop := c.s.Admit(Arrival{Datagram: d, Source: source, At: c.clk.Now(), Key: key})
		if counter := c.drops.of(drop); counter != nil {
			counter.Add(1)
		}
		if drop != Kept {
			continue
		}
		select {
		case out <- Received{Source: source, Port: from.Port(), Msg: d.Message, Kind: kind}:
		default:
		}
	}
}

// Send sends m, from this node whatever m.From says, to every peer, each
// datagram naming its destination and signed for it, and the format
// before as well to a Legacy peer. It tries every peer; the error joins
// those that failed, each naming its address.
func (c *Conn) Send(to []Peer, m Message) error {
	key := c.keys.signer()
	var errs []error
	for _, p := range to {
		forms := []Datagram{c.s.Seal(p.Node, m)}
		if p.Legacy {
			forms = append(forms, Datagram{Message: forms[0].Message, Legacy: true})
		}
		for _, f := range forms {
			if _, err := c.udp.WriteToUDPAddrPort(sign(key, Encode(f)), p.Addr); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func sign(key, b []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return append(mac.Sum(make([]byte, 0, sha256.Size+len(b))), b...)
}

// Close stops reading and releases the port.
func (c *Conn) Close() error { return c.udp.Close() }

// Port is the local port, the one asked for or, for 0, the one given.
func (c *Conn) Port() uint16 { return c.udp.LocalAddr().(*net.UDPAddr).AddrPort().Port() }
