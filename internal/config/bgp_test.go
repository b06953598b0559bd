package config_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/config"
)

func TestParseBGP(t *testing.T) {
	c, err := config.Parse(map[string]string{
		"bgp-asn":       "64512",
		"bgp-router-id": "198.18.0.99",
		"bgp-peers": `# the fabric's two routers
198.18.0.3 asn=64500
198.18.0.4 asn=4200000000 port=1179 hold-time=30s password=s3cret source=198.18.0.11
2001:db8::3 asn=1.10 hold-time=9`,
		"ranges": `198.19.100.0/24 announce=bgp communities=64512:100,64512:200 local-pref=200
198.18.100.0/24 announce=both iface=eth0 netmask=16
198.18.101.0/24 announce=arp`,
	})
	assert.NilError(t, err)
	assert.Equal(t, c.BGP.ASN, uint32(64512))
	assert.Equal(t, c.BGP.RouterID, netip.MustParseAddr("198.18.0.99"))
	assert.Assert(t, c.BGP.Enabled())
	assert.DeepEqual(t, c.BGP.Peers, []config.Peer{
		{Addr: netip.MustParseAddr("198.18.0.3"), ASN: 64500, Port: 179, HoldTime: 90 * time.Second, MaxPrefixes: config.DefaultMaxPrefixes, Line: 2},
		{Addr: netip.MustParseAddr("198.18.0.4"), ASN: 4200000000, Port: 1179, HoldTime: 30 * time.Second, MaxPrefixes: config.DefaultMaxPrefixes,
			Password: "s3cret", Source: netip.MustParseAddr("198.18.0.11"), Line: 3},
		{Addr: netip.MustParseAddr("2001:db8::3"), ASN: 1<<16 | 10, Port: 179, HoldTime: 9 * time.Second, MaxPrefixes: config.DefaultMaxPrefixes, Line: 4},
	}, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }))

	routed, ok := c.Lookup(netip.MustParseAddr("198.19.100.5"))
	assert.Assert(t, ok)
	assert.Equal(t, routed.Announce, config.AnnounceBGP)
	assert.Equal(t, routed.Iface, config.RouteIface, "a bgp-only address is announced on no LAN interface")
	assert.Equal(t, routed.Bits, 32, "as a host address")
	assert.DeepEqual(t, routed.Range.Communities, []uint32{64512<<16 | 100, 64512<<16 | 200})
	assert.Equal(t, routed.Range.LocalPref, uint32(200))

	both, _ := c.Lookup(netip.MustParseAddr("198.18.100.5"))
	assert.Equal(t, both.Announce, config.AnnounceBoth)
	assert.Assert(t, both.Announce.ARP() && both.Announce.BGP())
	assert.Equal(t, both.Iface, "eth0")
	assert.Equal(t, both.Bits, 16)

	arp, _ := c.Lookup(netip.MustParseAddr("198.18.101.5"))
	assert.Equal(t, arp.Announce.String(), "arp")
	assert.Assert(t, arp.Announce.ARP() && !arp.Announce.BGP())
	assert.Assert(t, arp.Equal(config.Binding{Iface: "auto", Bits: 32}), "writing announce=arp is the same as leaving it out")
}

func TestParseBGPErrors(t *testing.T) {
	peers := map[string]string{"bgp-asn": "64512", "bgp-peers": "198.18.0.3 asn=64500"}
	with := func(kv ...string) map[string]string {
		d := map[string]string{}
		for k, v := range peers {
			d[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			d[kv[i]] = kv[i+1]
		}
		return d
	}
	for _, tc := range []struct {
		name string
		data map[string]string
		want string
	}{
		{"asn zero", with("bgp-asn", "0"), `bgp-asn "0" is a reserved AS number`},
		{"asn text", with("bgp-asn", "AS64512"), `bgp-asn "AS64512" is not an AS number: use an AS number from 1 to 4294967294`},
		{"asn too big", with("bgp-asn", "4294967296"), `bgp-asn "4294967296" is not an AS number`},
		{"as_trans", with("bgp-asn", "23456"), `is a reserved AS number`},
		{"router id v6", with("bgp-router-id", "2001:db8::1"), `bgp-router-id "2001:db8::1" is not an IPv4 address`},
		{"peers without asn", map[string]string{"bgp-peers": "198.18.0.3 asn=64500"}, `bgp-peers is set but bgp-asn is not`},
		{"peer address", with("bgp-peers", "router1 asn=1"), `bgp-peers line 1 "router1 asn=1": "router1" is not a peer address`},
		{"peer asn missing", with("bgp-peers", "198.18.0.3"), `asn is missing: write asn=N`},
		{"peer port", with("bgp-peers", "198.18.0.3 asn=1 port=70000"), `port "70000" is not a TCP port`},
		{"peer hold time short", with("bgp-peers", "198.18.0.3 asn=1 hold-time=2s"), `hold-time "2s" must be whole seconds from 3s to 18h12m15s`},
		{"peer hold time fraction", with("bgp-peers", "198.18.0.3 asn=1 hold-time=3.5s"), `must be whole seconds`},
		{"peer source family", with("bgp-peers", "198.18.0.3 asn=1 source=2001:db8::1"), `source "2001:db8::1" is not an address of the peer's family`},
		{"peer option typo", with("bgp-peers", "198.18.0.3 asn=1 holdtime=9s"), `unknown option "holdtime" (did you mean "hold-time"?)`},
		{"peer option twice", with("bgp-peers", "198.18.0.3 asn=1 asn=2"), `option "asn" is given twice`},
		{"peer twice", with("bgp-peers", "198.18.0.3 asn=1\n198.18.0.3 asn=2"), `bgp-peers line 2 "198.18.0.3 asn=2": peer 198.18.0.3 is already on line 1`},
		{"bgp range without speaker", map[string]string{"ranges": "198.19.100.0/24 announce=bgp"},
			`ranges line 1 "198.19.100.0/24 announce=bgp": announce=bgp needs bgp-asn and at least one line in bgp-peers`},
		{"announce mode", with("ranges", "198.19.100.0/24 announce=ospf"), `announce "ospf" is not a mode: use "arp", "bgp" or "both"`},
		{"iface with bgp", with("ranges", "198.19.100.0/24 announce=bgp iface=eth0"), `option "iface" has no effect with announce=bgp: its addresses are host addresses on eipd's own device`},
		{"netmask with bgp", with("ranges", "198.19.100.0/24 netmask=24 announce=bgp"), `option "netmask" has no effect with announce=bgp`},
		{"communities without bgp", with("ranges", "198.19.100.0/24 communities=1:1"), `option "communities" needs announce=bgp or announce=both`},
		{"community", with("ranges", "198.19.100.0/24 announce=bgp communities=1:1,70000:1"), `"70000:1" is not a community: write ASN:VALUE`},
		{"local pref", with("ranges", "198.19.100.0/24 announce=both local-pref=-1"), `local-pref "-1" is not a preference`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse(tc.data)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBGPEqual(t *testing.T) {
	parse := func(peers string) config.Config {
		c, err := config.Parse(map[string]string{"bgp-asn": "64512", "bgp-peers": peers})
		assert.NilError(t, err)
		return c
	}
	a := parse("198.18.0.3 asn=64500")
	assert.Assert(t, a.Equal(parse("\n# moved down a line\n198.18.0.3   asn=64500 port=179")), "line numbers and defaults written out change nothing")
	assert.Assert(t, !a.Equal(parse("198.18.0.3 asn=64500 hold-time=30")))
	assert.Assert(t, !a.Equal(config.Default()))
}

func TestFormatCommunity(t *testing.T) {
	assert.Equal(t, config.FormatCommunity(64512<<16|100), "64512:100")
}

// A '#' starts a comment only at the start of a line or after a space:
// inside a password it is part of the password, not the end of it.
func TestParseBGPPasswordWithHash(t *testing.T) {
	c, err := config.Parse(map[string]string{
		"bgp-asn":   "64512",
		"bgp-peers": "198.18.0.3 asn=64500 password=ab#cd  # the fabric's router\n# 198.18.0.4 asn=64500",
	})
	assert.NilError(t, err)
	assert.Equal(t, len(c.BGP.Peers), 1)
	assert.Equal(t, c.BGP.Peers[0].Password, "ab#cd")
}

// A bad bgp-peers line is quoted in the error, which reaches the log,
// Events, the heartbeat and kubectl eip status: never with its password,
// nor with the value of an option eipd does not know (a misspelt
// password), nor a word that may be the rest of a password with a space.
func TestParseBGPErrorsHidePasswords(t *testing.T) {
	for _, line := range []string{
		"198.18.0.3 asn=64500 password=Sesame-1 port=70000",
		"198.18.0.3 asn=64500 password=Sesame-1 hold-time=1s",
		"198.18.0.3 asn=64500 password=Sesame-1 password=Sesame-1",
		"198.18.0.3 password=Sesame-1",
		"198.18.0.3 asn=64500 pasword=Sesame-1",
		"198.18.0.3 asn=64500 password=open Sesame-1",
		"198.18.0.3 asn=64500 password=" + strings.Repeat("Sesame-1", 11),
		"198.18.0.3 asn=64500 password=Sesame-1 password-secret=eip-bgp",
		"198.18.0.3 asn=64500 password=Sesame-1\n198.18.0.3 asn=64500 password=Sesame-1",
	} {
		_, err := config.Parse(map[string]string{"bgp-asn": "64512", "bgp-peers": line})
		assert.Assert(t, err != nil, line)
		assert.Assert(t, !strings.Contains(err.Error(), "Sesame"), "%q: %v", line, err)
		assert.ErrorContains(t, err, "bgp-peers line ")
	}
}

func TestParseBGPPasswordSecretAndPrefixLimit(t *testing.T) {
	c, err := config.Parse(map[string]string{
		"bgp-asn":   "64512",
		"bgp-peers": "198.18.0.3 asn=64500 password-secret=eip-bgp-router max-prefixes=50\n198.18.0.4 asn=64500",
	})
	assert.NilError(t, err)
	assert.Equal(t, c.BGP.Peers[0].PasswordSecret, "eip-bgp-router")
	assert.Equal(t, c.BGP.Peers[0].MaxPrefixes, uint32(50))
	assert.Equal(t, c.BGP.Peers[1].MaxPrefixes, uint32(config.DefaultMaxPrefixes), "every peer has a prefix limit")

	for line, want := range map[string]string{
		"198.18.0.3 asn=1 password-secret=Not_A_Name":    `password-secret "Not_A_Name" is not the name of a Secret`,
		"198.18.0.3 asn=1 max-prefixes=0":                `max-prefixes "0" is not a count from 1 to`,
		"198.18.0.3 asn=1 password=x password-secret=ab": `give either password or password-secret, not both`,
	} {
		_, err := config.Parse(map[string]string{"bgp-asn": "64512", "bgp-peers": line})
		assert.ErrorContains(t, err, want, line)
	}
}
