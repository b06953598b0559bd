package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Announce says how the holder of an IP tells the network where it lives.
type Announce string

const (
	// AnnounceARP binds the IP on the LAN interface and announces it with
	// gratuitous ARP or unsolicited neighbour advertisements.
	AnnounceARP Announce = "arp"
	// AnnounceBGP announces a host route for the IP to the BGP peers. The
	// address is a host address on eipd's own device, and the node never
	// answers ARP for it.
	AnnounceBGP Announce = "bgp"
	// AnnounceBoth does both: the IP is on the LAN interface and routed.
	AnnounceBoth Announce = "both"
)

// String names the mode; the zero value is arp.
func (a Announce) String() string {
	if a == "" {
		return string(AnnounceARP)
	}
	return string(a)
}

// ARP reports whether the IP is bound on the LAN and announced there.
func (a Announce) ARP() bool { return a != AnnounceBGP }

// BGP reports whether a host route is announced to the BGP peers.
func (a Announce) BGP() bool { return a == AnnounceBGP || a == AnnounceBoth }

// RouteIface is the interface a bgp-only range's addresses are announced
// on: loopback, which is always up, since no LAN interface carries them.
// The addresses themselves live on eipd's own device, where traffic routed
// to the node is accepted. (IPv6 neighbour discovery only answers for
// addresses of the interface asked on; for IPv4 the daemon drops ARP
// requests for these ranges, see netif.ARPFilter.)
const RouteIface = "lo"

// Range options of route mode.
const (
	optAnnounce    = "announce"
	optCommunities = "communities"
	optLocalPref   = "local-pref"
)

// BGP is the speaker's configuration: the bgp-* keys.
type BGP struct {
	// ASN is this cluster's autonomous system number; 0 when BGP is off.
	ASN uint32
	// RouterID is the BGP identifier; invalid means each node uses its own
	// IPv4 address.
	RouterID netip.Addr
	// Peers are the routers every node opens a session to.
	Peers []Peer
}

// Peer is one line of bgp-peers.
type Peer struct {
	Addr netip.Addr
	ASN  uint32
	// Port is the peer's TCP port (default 179).
	Port uint16
	// HoldTime is proposed in the OPEN message (default 90s); the
	// session uses the smaller of both sides' values.
	HoldTime time.Duration
	// Password enables TCP MD5 signatures (RFC 2385) when set.
	Password string
	// PasswordSecret names the Secret, in eipd's namespace, whose
	// "password" the session uses instead of Password.
	PasswordSecret string
	// MaxPrefixes is how many prefixes the peer may send before the
	// speaker closes the session: it accepts none of them, but holds
	// what it receives while the session lasts.
	MaxPrefixes uint32
	// Source is the local address of the session; invalid means the
	// kernel's choice for the route to Addr.
	Source netip.Addr
	// Line is the 1-based line within bgp-peers, for messages.
	Line int
}

// Enabled reports whether a BGP speaker should run.
func (b BGP) Enabled() bool { return b.ASN != 0 && len(b.Peers) > 0 }

// Equal reports whether b and o configure the speaker the same way.
func (b BGP) Equal(o BGP) bool {
	return b.ASN == o.ASN && b.RouterID == o.RouterID &&
		slices.EqualFunc(b.Peers, o.Peers, func(p, q Peer) bool {
			p.Line, q.Line = 0, 0
			return p == q
		})
}

const (
	keyBGPASN      = "bgp-asn"
	keyBGPRouterID = "bgp-router-id"
	keyBGPPeers    = "bgp-peers"
)

const (
	defaultBGPPort  = 179
	defaultHoldTime = 90 * time.Second
	// RFC 4271 4.2: a hold time is zero or at least three seconds; zero
	// (no keepalives) would keep a dead node's routes forever.
	minHoldTime = 3 * time.Second
	maxHoldTime = 65535 * time.Second
	// DefaultMaxPrefixes is a peer's prefix limit unless its line sets
	// one: enough for a router that reflects the cluster's own routes back
	// to it, far below a full table.
	DefaultMaxPrefixes = 1000
	maxMaxPrefixes     = 10_000_000
)

// parseBGP reads bgp-asn, bgp-router-id and bgp-peers into c.BGP.
func (c *Config) parseBGP(value func(string) (string, bool), raw string) error {
	var errs error
	if v, ok := value(keyBGPASN); ok {
		n, err := parseASN(v)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s %q %w", keyBGPASN, v, err))
		}
		c.BGP.ASN = n
	}
	if v, ok := value(keyBGPRouterID); ok {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() || a.IsUnspecified() {
			errs = errors.Join(errs, fmt.Errorf("%s %q is not an IPv4 address: a router ID is written as one, such as 198.18.0.11; leave it empty to use each node's own IPv4 address", keyBGPRouterID, v))
		} else {
			c.BGP.RouterID = a
		}
	}
	if _, ok := value(keyBGPPeers); ok {
		for i, line := range strings.Split(raw, "\n") {
			if line = strings.TrimSpace(uncomment(line)); line == "" {
				continue
			}
			p, err := parsePeer(line)
			if err != nil {
				errs = errors.Join(errs, fmt.Errorf("%s line %d %q: %w", keyBGPPeers, i+1, shownPeerLine(line), err))
				continue
			}
			p.Line = i + 1
			if j := slices.IndexFunc(c.BGP.Peers, func(q Peer) bool { return q.Addr == p.Addr }); j >= 0 {
				errs = errors.Join(errs, fmt.Errorf("%s line %d %q: peer %s is already on line %d", keyBGPPeers, p.Line, shownPeerLine(line), p.Addr, c.BGP.Peers[j].Line))
				continue
			}
			c.BGP.Peers = append(c.BGP.Peers, p)
		}
	}
	if len(c.BGP.Peers) > 0 && c.BGP.ASN == 0 && errs == nil {
		errs = fmt.Errorf("%s is set but %s is not: set this cluster's AS number", keyBGPPeers, keyBGPASN)
	}
	return errs
}

// checkRouteRanges: a range announced over BGP needs a speaker with peers.
func (c *Config) checkRouteRanges() error {
	var errs error
	for _, r := range c.Ranges {
		if r.Announce.BGP() && !c.BGP.Enabled() {
			errs = errors.Join(errs, fmt.Errorf("%s line %d %q: announce=%s needs %s and at least one line in %s",
				keyRanges, r.Line, r.Text, r.Announce, keyBGPASN, keyBGPPeers))
		}
	}
	return errs
}

// parseASN reads an AS number, plain ("64512") or asdot ("1.10").
func parseASN(s string) (uint32, error) {
	const help = "use an AS number from 1 to 4294967294, such as 64512"
	if hi, lo, dot := strings.Cut(s, "."); dot {
		h, err1 := strconv.ParseUint(hi, 10, 16)
		l, err2 := strconv.ParseUint(lo, 10, 16)
		if err1 != nil || err2 != nil || h == 0 && l == 0 {
			return 0, fmt.Errorf("is not an AS number: %s", help)
		}
		return uint32(h<<16 | l), nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("is not an AS number: %s", help)
	}
	// 0 and 4294967295 are reserved (RFC 7607, RFC 7300); 23456 is AS_TRANS.
	if n == 0 || n == 4294967295 || n == 23456 {
		return 0, fmt.Errorf("is a reserved AS number: %s", help)
	}
	return uint32(n), nil
}

// Peer options.
const (
	peerASN            = "asn"
	peerPort           = "port"
	peerHoldTime       = "hold-time"
	peerPassword       = "password"
	peerPasswordSecret = "password-secret"
	peerSource         = "source"
	peerMaxPrefixes    = "max-prefixes"
)

// uncomment drops the comment from a bgp-peers line: a '#' at the start of
// the line or after white space starts one. Unlike in ranges, a '#' inside
// a word is kept, so that a password may hold one.
func uncomment(line string) string {
	for i := range len(line) {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}

// shownPeerOptions are the options whose values messages may quote: all
// but the password.
var shownPeerOptions = []string{peerASN, peerPort, peerHoldTime, peerPasswordSecret, peerSource, peerMaxPrefixes}

// hidden stands for a value messages must not quote.
const hidden = "***"

// shownPeerLine is a bgp-peers line as messages quote it. A password is
// hidden, and so is what may be one: the value of an option eipd does not
// know (a misspelt password) and a word that is no KEY=VALUE (the rest of
// a password with a space).
func shownPeerLine(line string) string {
	fields := strings.Fields(line)
	for i, f := range fields {
		key, _, ok := strings.Cut(f, "=")
		switch {
		case ok && !slices.Contains(shownPeerOptions, key):
			fields[i] = key + "=" + hidden
		case !ok && i > 0:
			fields[i] = hidden
		}
	}
	return strings.Join(fields, " ")
}

// parsePeer reads "ADDRESS asn=N [port=N] [hold-time=D] [password=S |
// password-secret=NAME] [source=ADDRESS] [max-prefixes=N]". Its errors
// quote no password, nor anything that may be part of one.
func parsePeer(line string) (Peer, error) {
	fields := strings.Fields(line)
	a, err := netip.ParseAddr(fields[0])
	if err != nil || a.Zone() != "" || a.Is4In6() || a.IsUnspecified() || a.IsMulticast() {
		return Peer{}, fmt.Errorf("%q is not a peer address: start the line with the router's IPv4 or IPv6 address", shownPeerLine(fields[0]))
	}
	p := Peer{Addr: a, Port: defaultBGPPort, HoldTime: defaultHoldTime, MaxPrefixes: DefaultMaxPrefixes}
	seen := map[string]bool{}
	options := append(slices.Clone(shownPeerOptions), peerPassword)
	for i, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return Peer{}, fmt.Errorf("word %d is not an option: write KEY=VALUE (a password with spaces belongs in a Secret, see %s)", i+2, peerPasswordSecret)
		}
		if val == "" {
			return Peer{}, fmt.Errorf("option %q has no value: write %s=VALUE", key, key)
		}
		if seen[key] {
			return Peer{}, fmt.Errorf("option %q is given twice", key)
		}
		seen[key] = true
		switch key {
		case peerASN:
			if p.ASN, err = parseASN(val); err != nil {
				return Peer{}, fmt.Errorf("asn %q %w", val, err)
			}
		case peerPort:
			n, err := strconv.ParseUint(val, 10, 16)
			if err != nil || n == 0 {
				return Peer{}, fmt.Errorf("port %q is not a TCP port: use 1 to 65535", val)
			}
			p.Port = uint16(n)
		case peerHoldTime:
			d, err := parseDuration(val)
			if err != nil {
				return Peer{}, fmt.Errorf("hold-time %q %w", val, err)
			}
			if d < minHoldTime || d > maxHoldTime || d%time.Second != 0 {
				return Peer{}, fmt.Errorf("hold-time %q must be whole seconds from %v to %v (RFC 4271)", val, minHoldTime, maxHoldTime)
			}
			p.HoldTime = d
		case peerPassword:
			if len(val) > 80 {
				return Peer{}, errors.New("password is longer than the kernel's 80 bytes for TCP MD5 keys")
			}
			p.Password = val
		case peerPasswordSecret:
			if msgs := validation.IsDNS1123Subdomain(val); len(msgs) > 0 {
				return Peer{}, fmt.Errorf("password-secret %q is not the name of a Secret: %s", val, strings.Join(msgs, "; "))
			}
			p.PasswordSecret = val
		case peerMaxPrefixes:
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil || n == 0 || n > maxMaxPrefixes {
				return Peer{}, fmt.Errorf("max-prefixes %q is not a count from 1 to %d", val, maxMaxPrefixes)
			}
			p.MaxPrefixes = uint32(n)
		case peerSource:
			s, err := netip.ParseAddr(val)
			if err != nil || s.Zone() != "" || s.Is4() != a.Is4() || s.IsUnspecified() {
				return Peer{}, fmt.Errorf("source %q is not an address of the peer's family", val)
			}
			p.Source = s
		default:
			return Peer{}, fmt.Errorf("unknown option %q%s: use %s", key, didYouMean(key, options), strings.Join(options, ", "))
		}
	}
	if p.ASN == 0 {
		return Peer{}, errors.New("asn is missing: write asn=N with the router's AS number")
	}
	if p.Password != "" && p.PasswordSecret != "" {
		return Peer{}, fmt.Errorf("give either %s or %s, not both", peerPassword, peerPasswordSecret)
	}
	return p, nil
}

// parseCommunities reads standard communities "65000:100,65000:200".
func parseCommunities(s string) ([]uint32, error) {
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		hi, lo, ok := strings.Cut(f, ":")
		h, err1 := strconv.ParseUint(hi, 10, 16)
		l, err2 := strconv.ParseUint(lo, 10, 16)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("communities %q: %q is not a community: write ASN:VALUE with both parts from 0 to 65535, separated by commas", s, f)
		}
		if c := uint32(h<<16 | l); !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// FormatCommunity writes a standard community as ASN:VALUE.
func FormatCommunity(c uint32) string { return fmt.Sprintf("%d:%d", c>>16, c&0xffff) }
