// Package lanlive carries liveness between eipds over the LAN: one small
// UDP datagram per peer and renew interval, saying "I am alive" and how
// long ago the sender last had a sign of life of every other node. What
// they mean is package lease's (Liveness.Datagram); the agent's speaker
// builds and times them; this package only encodes, authenticates and
// moves them, and drops every datagram that is not fresh.
//
// Every datagram carries an HMAC-SHA256 under a key that only eipds hold
// (the Secret of key.go). A datagram's source address alone proves little:
// a pod whose traffic leaves its node masqueraded has the node's address,
// and a forged report that a node went unheard would make it drop its IPs.
// A signature alone proves little more: a datagram captured on the LAN and
// sent again is still signed. So every datagram names its destination and
// the boot of the destination's process that the sender last heard, and
// carries the sender's boot and a counter (conn.go says what counts).
package lanlive

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// magic starts every datagram of the current format, legacyMagic every
// datagram of the format before it (no boot, counter or destination): a
// datagram that starts with neither is not eip's and is dropped.
const (
	magic       = "eip-liveness 2"
	legacyMagic = "eip-liveness 1"
)

// MaxSize is the largest datagram read, its signature included; larger
// ones are cut and dropped.
const MaxSize = 64 << 10

// maxAge is the largest age a datagram carries: older signs say nothing.
const maxAge = time.Hour

// Message is what a datagram says: its sender and the ages of the
// sender's latest signs of life of other nodes.
type Message struct {
	From string
	Ages map[string]time.Duration
}

// Datagram is a Message as it goes on the wire. Boot identifies the
// sender's process (its start time in nanoseconds: a later process has a
// larger one) and Seq counts its datagrams; To is the destination node and
// ToBoot the boot of the destination's process that the sender last heard
// (0: none yet). A Legacy datagram is of the format before, which has none
// of them.
type Datagram struct {
	Message
	Boot, Seq uint64
	To        string
	ToBoot    uint64
	Legacy    bool
}

// Encode writes d as text: the magic line, the sender with its boot and
// counter, the destination with its boot, then one line per node with the
// age in milliseconds. A Legacy datagram has only the magic line, the
// sender and the ages.
func Encode(d Datagram) []byte {
	var b bytes.Buffer
	if d.Legacy {
		b.WriteString(legacyMagic + "\n" + d.From + "\n")
	} else {
		fmt.Fprintf(&b, "%s\n%s %x %d\n%s %x\n", magic, d.From, d.Boot, d.Seq, d.To, d.ToBoot)
	}
	for n, age := range d.Ages {
		fmt.Fprintf(&b, "%s %d\n", n, min(age, maxAge).Milliseconds())
	}
	return b.Bytes()
}

// Decode reads a datagram written by Encode.
func Decode(b []byte) (Datagram, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 512), MaxSize)
	var d Datagram
	if !sc.Scan() {
		return Datagram{}, errors.New("not an eip liveness datagram")
	}
	switch sc.Text() {
	case magic:
	case legacyMagic:
		d.Legacy = true
	default:
		return Datagram{}, errors.New("not an eip liveness datagram")
	}
	if !sc.Scan() {
		return Datagram{}, errors.New("liveness datagram: no sender")
	}
	if d.Legacy {
		d.From = sc.Text()
	} else {
		f := strings.Split(sc.Text(), " ")
		if len(f) != 3 || !parseBoot(f[1], &d.Boot) || d.Boot == 0 || !parseSeq(f[2], &d.Seq) {
			return Datagram{}, fmt.Errorf("liveness datagram: bad sender line %q", sc.Text())
		}
		d.From = f[0]
	}
	if !validName(d.From) {
		return Datagram{}, errors.New("liveness datagram: no sender")
	}
	if !d.Legacy {
		if !sc.Scan() {
			return Datagram{}, fmt.Errorf("liveness datagram from %s: no destination", d.From)
		}
		to, boot, ok := strings.Cut(sc.Text(), " ")
		if !ok || !validName(to) || !parseBoot(boot, &d.ToBoot) {
			return Datagram{}, fmt.Errorf("liveness datagram from %s: bad destination line %q", d.From, sc.Text())
		}
		d.To = to
	}
	d.Ages = map[string]time.Duration{}
	for sc.Scan() {
		name, ms, ok := strings.Cut(sc.Text(), " ")
		v, err := strconv.ParseUint(ms, 10, 32)
		if !ok || err != nil || !validName(name) || time.Duration(v)*time.Millisecond > maxAge {
			return Datagram{}, fmt.Errorf("liveness datagram from %s: bad line %q", d.From, sc.Text())
		}
		d.Ages[name] = time.Duration(v) * time.Millisecond
	}
	if err := sc.Err(); err != nil {
		return Datagram{}, fmt.Errorf("liveness datagram: %w", err)
	}
	return d, nil
}

// parseBoot reads a boot in hexadecimal, as Encode writes it.
func parseBoot(s string, v *uint64) bool {
	n, err := strconv.ParseUint(s, 16, 64)
	*v = n
	return err == nil && s == strconv.FormatUint(n, 16)
}

// parseSeq reads a counter in decimal, as Encode writes it.
func parseSeq(s string, v *uint64) bool {
	n, err := strconv.ParseUint(s, 10, 64)
	*v = n
	return err == nil && s == strconv.FormatUint(n, 10)
}

// validName: a node name as Kubernetes allows it (at most 253 characters,
// no spaces); the rest is checked against the Node objects.
func validName(s string) bool {
	return s != "" && len(s) <= 253 && !strings.ContainsAny(s, " \t\r\n")
}
