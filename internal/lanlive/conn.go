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
)

// What counts (docs/design.md, Replayed datagrams). A datagram is taken
// in only when it is signed with a key of the Keyring, names this node as
// its destination, and is newer than every datagram taken in from its
// sender: a larger boot, or the same boot and a larger counter. A replay
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

// maxSenders bounds the senders whose boot and counter a Conn keeps. Only
// holders of the key create one; a cluster has at most a few thousand
// nodes.
const maxSenders = 4096

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
}

// Session is the freshness of one process's datagrams: its boot and
// counter, and the newest boot and counter taken in from each sender (see
// the top of this file). A Conn keeps one; it is apart so that a
// simulation of many nodes runs it without sockets. Safe for concurrent
// use.
type Session struct {
	self string
	boot uint64

	mu      sync.Mutex
	seq     uint64
	senders map[string]*sender
}

// sender is the newest boot and counter this process took in from a node.
type sender struct {
	boot, seq uint64
}

// NewSession returns the Session of the process of node whose boot is
// boot (nonzero; a later process of the same node has a larger one).
func NewSession(node string, boot uint64) *Session {
	return &Session{self: node, boot: boot, senders: map[string]*sender{}}
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
	// Full: from a sender beyond the maxSenders this process keeps.
	Full
)

// Admit decides on an authentic datagram d: whether it is taken in, and
// as what, or why not.
func (s *Session) Admit(d Datagram) (Kind, Drop) {
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
	if d.To != s.self {
		return 0, Misaddressed
	}
	if p == nil {
		if len(s.senders) >= maxSenders {
			return 0, Full
		}
		p = &sender{}
		s.senders[d.From] = p
	}
	if d.Boot < p.boot || d.Boot == p.boot && d.Seq <= p.seq {
		return 0, Stale
	}
	p.boot, p.seq = d.Boot, d.Seq
	if d.ToBoot != s.boot {
		return Hello, Kept
	}
	return Live, Kept
}

// Conn is a UDP socket that signs what it sends and takes in only what is
// signed with a key of its Keyring and fresh (see above).
type Conn struct {
	udp   *net.UDPConn
	keys  *Keyring
	drops *Drops
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
}

// Listen binds the port and delivers each datagram taken in to out until
// Close; out is dropped to when full, as a lost datagram is. Binding a
// port from 1024 up needs no privilege.
func Listen(o Options, out chan<- Received) (*Conn, error) {
	if o.Keys == nil || !validName(o.Node) {
		return nil, errors.New("liveness over the LAN: no key or no node name")
	}
	if o.Boot == 0 {
		o.Boot = uint64(time.Now().UnixNano())
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
	c := &Conn{udp: udp, keys: o.Keys, drops: o.Drops, s: NewSession(o.Node, o.Boot)}
	go c.read(out)
	return c, nil
}

// read delivers what arrives until Close. With fifty nodes a node checks
// a hundred datagrams a second.
func (c *Conn) read(out chan<- Received) {
	buf := make([]byte, MaxSize)
	for {
		n, from, err := c.udp.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		if n < sha256.Size || !c.keys.verify(buf[:sha256.Size], buf[sha256.Size:n]) {
			c.drops.BadSignature.Add(1)
			continue
		}
		d, err := Decode(buf[sha256.Size:n])
		if err != nil {
			continue
		}
		kind, drop := c.s.Admit(d)
		switch drop {
		case Stale:
			c.drops.Stale.Add(1)
			continue
		case Misaddressed:
			c.drops.Misaddressed.Add(1)
			continue
		case Full:
			continue
		}
		select {
		case out <- Received{Source: from.Addr().Unmap(), Port: from.Port(), Msg: d.Message, Kind: kind}:
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
