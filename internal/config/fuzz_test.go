package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The seed corpus lives in testdata/fuzz; `go test` runs it as ordinary
// tests, `go test -fuzz FuzzParse` explores from it.

func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, ranges, netmask, netmask6, iface, lease, renew, fence, policy, apiLoss, selector, preferred,
		livenessPort, hbWrites, externalIPs, bgpASN, bgpRouterID, bgpPeers string) {
		c, err := Parse(map[string]string{
			keyRanges: ranges, keyNetmask: netmask, keyNetmask6: netmask6, keyIface: iface,
			keyLeaseDuration: lease, keyRenewInterval: renew, keyFenceAfter: fence,
			keyPolicy: policy, keyAPILoss: apiLoss, keyNodeSelector: selector, keyPreferredNodes: preferred,
			keyLivenessPort: livenessPort, keyHBWrites: hbWrites, keyExternalIPs: externalIPs,
			keyBGPASN: bgpASN, keyBGPRouterID: bgpRouterID, keyBGPPeers: bgpPeers,
		})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			if len(c.Ranges) != 0 || c.NodeSelector != nil {
				t.Fatalf("failed Parse returned a usable config: %+v", c)
			}
			return
		}
		checkConfig(t, c)
	})
}

// FuzzParsePeer: a line of bgp-peers, as Parse hands it over (trimmed,
// not blank). Whatever parses is a usable peer; no error quotes a
// password.
func FuzzParsePeer(f *testing.F) {
	for _, line := range []string{
		"198.18.0.1 asn=64500",
		"2001:db8::1 asn=4200000000 port=1179 hold-time=9s max-prefixes=10 source=2001:db8::2",
		"198.18.0.1 asn=64500 password=s3cr3t-pass",
		"198.18.0.1 asn=64500 password-secret=bgp-auth",
		"198.18.0.1 asn=64500 pasword=s3cr3t-pass",
		"198.18.0.1 s3cr3t pass",
	} {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		line = strings.TrimSpace(line)
		if line == "" {
			return
		}
		p, err := parsePeer(line)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			for _, f := range strings.Fields(line) {
				pw, ok := strings.CutPrefix(f, peerPassword+"=")
				if ok && len(pw) >= 8 && strings.Count(line, pw) == 1 && strings.Contains(err.Error(), pw) {
					t.Fatalf("error %q quotes the password of %q", err, line)
				}
			}
			return
		}
		checkPeer(t, p)
	})
}

// checkPeer asserts what every parsed Peer guarantees.
func checkPeer(t *testing.T, p Peer) {
	t.Helper()
	switch {
	case !p.Addr.IsValid() || p.Addr.Zone() != "" || p.Addr.Is4In6() || p.Addr.IsUnspecified() || p.Addr.IsMulticast():
		t.Fatalf("peer address %v", p.Addr)
	case p.ASN == 0 || p.Port == 0 || p.MaxPrefixes == 0 || p.MaxPrefixes > maxMaxPrefixes:
		t.Fatalf("peer %+v: asn, port or max-prefixes out of bounds", p)
	case p.HoldTime < minHoldTime || p.HoldTime > maxHoldTime || p.HoldTime%time.Second != 0:
		t.Fatalf("hold time %v", p.HoldTime)
	case p.Password != "" && p.PasswordSecret != "", len(p.Password) > 80:
		t.Fatalf("password %q and secret %q", p.Password, p.PasswordSecret)
	case p.Source.IsValid() && p.Source.Is4() != p.Addr.Is4():
		t.Fatalf("source %v of peer %v", p.Source, p.Addr)
	}
}

func FuzzParseRange(f *testing.F) {
	f.Fuzz(func(t *testing.T, line string) {
		r, err := parseRange(line, Default())
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		checkRange(t, r)
		again, err := parseRange(r.Text, Default())
		if err != nil || !again.sameEffect(r) || again.Text != r.Text {
			t.Fatalf("reparsing %q: got %+v, %v; want %+v", r.Text, again, err, r)
		}
		// A line without comment or newline means the same inside the ranges key.
		if !strings.ContainsAny(line, "#\n") {
			// With a speaker configured, so that announce=bgp lines parse too.
			c, err := Parse(map[string]string{keyRanges: line, keyBGPASN: "64512", keyBGPPeers: "198.18.0.1 asn=64500"})
			if err != nil || len(c.Ranges) != 1 || c.Ranges[0].First != r.First || c.Ranges[0].Last != r.Last {
				t.Fatalf("Parse of %q: %+v, %v; parseRange gave %+v", line, c.Ranges, err, r)
			}
		}
	})
}

// checkConfig asserts what every successfully parsed Config guarantees.
func checkConfig(t *testing.T, c Config) {
	t.Helper()
	if c.NodeSelector == nil {
		t.Fatal("nil node selector")
	}
	if c.RenewInterval <= 0 || c.RenewInterval > c.LeaseDuration/2 {
		t.Fatalf("renew-interval %v against lease-duration %v", c.RenewInterval, c.LeaseDuration)
	}
	if c.FenceAfter <= c.RenewInterval || c.FenceAfter >= c.LeaseDuration {
		t.Fatalf("fence-after %v outside (%v, %v)", c.FenceAfter, c.RenewInterval, c.LeaseDuration)
	}
	if lt := c.AddressLifetime(); lt < minLease || lt%minLease != 0 || lt > c.LeaseDuration {
		t.Fatalf("address lifetime %v with lease-duration %v", lt, c.LeaseDuration)
	}
	if s := c.RankStep(); s < 50e6 || s > 250e6 {
		t.Fatalf("rank step %v", s)
	}
	if c.LivenessPort != 0 && c.LivenessPort < 1024 {
		t.Fatalf("liveness port %d", c.LivenessPort)
	}
	if c.HeartbeatWrites < minHBWrites || c.HeartbeatWrites > maxHBWrites {
		t.Fatalf("heartbeat writes %g", c.HeartbeatWrites)
	}
	for _, p := range c.BGP.Peers {
		checkPeer(t, p)
	}
	if c.BGP.RouterID.IsValid() && !c.BGP.RouterID.Is4() {
		t.Fatalf("router ID %v", c.BGP.RouterID)
	}
	if checkIface(c.Iface) != nil || c.Netmask4 < 8 || c.Netmask4 > 32 || c.Netmask6 < 1 || c.Netmask6 > 128 {
		t.Fatalf("iface %q netmask %d netmask6 %d", c.Iface, c.Netmask4, c.Netmask6)
	}
	names := map[string]bool{}
	for i, r := range c.Ranges {
		checkRange(t, r)
		if i > 0 && c.Ranges[i-1].Last.Compare(r.First) >= 0 {
			t.Fatalf("ranges %q and %q overlap or are out of order", c.Ranges[i-1].Text, r.Text)
		}
		if r.Name != "" && names[r.Name] {
			t.Fatalf("name %q used twice", r.Name)
		}
		names[r.Name] = true
		for _, ip := range []netip.Addr{r.First, r.Last} {
			if b, ok := c.Lookup(ip); !ok || b.Range.Text != r.Text || b.Range.Line != r.Line {
				t.Fatalf("Lookup(%s) = %+v, %v; want range %q", ip, b, ok, r.Text)
			}
		}
		if p := r.First.Prev(); p.IsValid() && (i == 0 || p != c.Ranges[i-1].Last) {
			if b, ok := c.Lookup(p); ok {
				t.Fatalf("Lookup(%s) found %q, outside every range", p, b.Range.Text)
			}
		}
	}
}

// checkRange asserts what every parsed Range guarantees.
func checkRange(t *testing.T, r Range) {
	t.Helper()
	switch {
	case !r.First.IsValid() || !r.Last.IsValid():
		t.Fatalf("%q: invalid ends %v %v", r.Text, r.First, r.Last)
	case r.First.BitLen() != r.Last.BitLen():
		t.Fatalf("%q: families differ", r.Text)
	case r.First.Compare(r.Last) > 0:
		t.Fatalf("%q: first %s after last %s", r.Text, r.First, r.Last)
	case r.First.Is4In6() || r.Last.Is4In6() || r.First.Zone() != "" || r.Last.Zone() != "":
		t.Fatalf("%q: mapped or zoned ends", r.Text)
	case specialOverlap(r.First, r.Last) != "" || Unusable(r.First) != "" || Unusable(r.Last) != "":
		t.Fatalf("%q: includes special addresses", r.Text)
	case !r.Contains(r.First) || !r.Contains(r.Last):
		t.Fatalf("%q: does not contain its ends", r.Text)
	case r.Prefix.IsValid() && (r.Prefix.Addr() != r.First || lastAddr(r.Prefix) != r.Last):
		t.Fatalf("%q: prefix %s does not match %s-%s", r.Text, r.Prefix, r.First, r.Last)
	case r.First.Is4() && (r.Bits < 8 || r.Bits > 32), r.First.Is6() && (r.Bits < 1 || r.Bits > 128):
		t.Fatalf("%q: bits %d", r.Text, r.Bits)
	case checkIface(r.Iface) != nil:
		t.Fatalf("%q: iface %q", r.Text, r.Iface)
	case r.Text != strings.TrimSpace(r.Text) || r.Text == "":
		t.Fatalf("text %q not trimmed", r.Text)
	}
}
