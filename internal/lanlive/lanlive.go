// Package lanlive carries liveness between eipds over the LAN: one small
// UDP datagram per peer and renew interval, saying "I am alive" and how
// long ago the sender last had a sign of life of every other node. What
// they mean is package lease's (Liveness.Datagram); the agent's speaker
// builds and times them; this package only encodes, authenticates and
// moves them.
//
// Every datagram carries an HMAC-SHA256 under a key that only eipds hold
// (the Secret of key.go). A datagram's source address alone proves little:
// a pod whose traffic leaves its node masqueraded has the node's address,
// and a forged report that a node went unheard would make it drop its IPs.
package lanlive

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// magic starts every datagram; a datagram that does not start with it is
// not eip's and is dropped.
const magic = "eip-liveness 1"

// MaxSize is the largest datagram read, its signature included; larger
// ones are cut and dropped.
const MaxSize = 64 << 10

// maxAge is the largest age a datagram carries: older signs say nothing.
const maxAge = time.Hour

// Message is one datagram: its sender and the ages of the sender's latest
// signs of life of other nodes.
type Message struct {
	From string
	Ages map[string]time.Duration
}

// Encode writes m as text: the magic line, the sender, then one line per
// node with the age in milliseconds.
func Encode(m Message) []byte {
	var b bytes.Buffer
	b.WriteString(magic + "\n" + m.From + "\n")
	for n, age := range m.Ages {
		fmt.Fprintf(&b, "%s %d\n", n, min(age, maxAge).Milliseconds())
	}
	return b.Bytes()
}

// Decode reads a datagram written by Encode.
func Decode(b []byte) (Message, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 512), MaxSize)
	if !sc.Scan() || sc.Text() != magic {
		return Message{}, errors.New("not an eip liveness datagram")
	}
	if !sc.Scan() || !validName(sc.Text()) {
		return Message{}, errors.New("liveness datagram: no sender")
	}
	m := Message{From: sc.Text(), Ages: map[string]time.Duration{}}
	for sc.Scan() {
		name, ms, ok := strings.Cut(sc.Text(), " ")
		v, err := strconv.ParseUint(ms, 10, 32)
		if !ok || err != nil || !validName(name) || time.Duration(v)*time.Millisecond > maxAge {
			return Message{}, fmt.Errorf("liveness datagram from %s: bad line %q", m.From, sc.Text())
		}
		m.Ages[name] = time.Duration(v) * time.Millisecond
	}
	if err := sc.Err(); err != nil {
		return Message{}, fmt.Errorf("liveness datagram: %w", err)
	}
	return m, nil
}

// validName: a node name as Kubernetes allows it (at most 253 characters,
// no spaces); the rest is checked against the Node objects.
func validName(s string) bool {
	return s != "" && len(s) <= 253 && !strings.ContainsAny(s, " \t\r\n")
}

// Received is a datagram as it arrived.
type Received struct {
	Source netip.Addr // the sender's address, IPv4 unmapped
	Msg    Message
}

// Conn is a UDP socket on every address of the host (IPv4 and IPv6) that
// signs what it sends and drops what was not signed with its key.
type Conn struct {
	udp *net.UDPConn
	key []byte
}

// Listen binds port on every address and delivers each well-formed
// datagram signed with key to out until Close; out is dropped to when
// full, as a lost datagram is. Binding a port from 1024 up needs no
// privilege.
func Listen(port uint16, key []byte, out chan<- Received) (*Conn, error) {
	if len(key) < minKeySize {
		return nil, fmt.Errorf("liveness over the LAN: a key of %d bytes, want at least %d", len(key), minKeySize)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{Port: int(port)})
	if err != nil {
		return nil, fmt.Errorf("liveness over the LAN: listen on UDP port %d: %w", port, err)
	}
	c := &Conn{udp: udp, key: key}
	go c.read(out)
	return c, nil
}

// read delivers what arrives until Close. It keeps one HMAC state and
// resets it for each datagram: with fifty nodes a node checks a hundred
// datagrams a second.
func (c *Conn) read(out chan<- Received) {
	buf := make([]byte, MaxSize)
	mac := hmac.New(sha256.New, c.key)
	sum := make([]byte, 0, sha256.Size)
	for {
		n, from, err := c.udp.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || n < sha256.Size {
			continue
		}
		mac.Reset()
		mac.Write(buf[sha256.Size:n])
		if sum = mac.Sum(sum[:0]); !hmac.Equal(buf[:sha256.Size], sum) {
			continue
		}
		m, err := Decode(buf[sha256.Size:n])
		if err != nil {
			continue
		}
		select {
		case out <- Received{Source: from.Addr().Unmap(), Msg: m}:
		default:
		}
	}
}

// Send sends b (an Encode'd message) to every address of to, signed once
// for all of them. It tries every address; the error joins those that
// failed, each naming its address.
func (c *Conn) Send(to []netip.AddrPort, b []byte) error {
	mac := hmac.New(sha256.New, c.key)
	mac.Write(b)
	signed := append(mac.Sum(make([]byte, 0, sha256.Size+len(b))), b...)
	var errs []error
	for _, a := range to {
		if _, err := c.udp.WriteToUDPAddrPort(signed, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close stops reading and releases the port.
func (c *Conn) Close() error { return c.udp.Close() }

// Port is the local port, the one asked for or, for 0, the one given.
func (c *Conn) Port() uint16 { return c.udp.LocalAddr().(*net.UDPAddr).AddrPort().Port() }
