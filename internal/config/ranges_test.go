package config_test

import (
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/internal/config"
)

var (
	a  = netip.MustParseAddr
	pf = netip.MustParsePrefix
)

func TestParseRanges(t *testing.T) {
	tests := []struct {
		name   string
		data   map[string]string // "ranges" is set from text
		text   string
		want   []config.Range
		errors []string
	}{
		{
			name: "cidr",
			text: "198.18.100.0/24",
			want: []config.Range{{Text: "198.18.100.0/24", Line: 1, First: a("198.18.100.0"), Last: a("198.18.100.255"),
				Prefix: pf("198.18.100.0/24"), Bits: 32, Iface: "auto"}},
		},
		{
			name: "span",
			text: "  198.18.100.10-198.18.100.20  ",
			want: []config.Range{{Text: "198.18.100.10-198.18.100.20", Line: 1, First: a("198.18.100.10"), Last: a("198.18.100.20"),
				Bits: 32, Iface: "auto"}},
		},
		{
			name: "single address",
			text: "198.18.100.7",
			want: []config.Range{{Text: "198.18.100.7", Line: 1, First: a("198.18.100.7"), Last: a("198.18.100.7"), Bits: 32, Iface: "auto"}},
		},
		{
			name: "ipv6 cidr",
			text: "2001:db8:100::/120",
			want: []config.Range{{Text: "2001:db8:100::/120", Line: 1, First: a("2001:db8:100::"), Last: a("2001:db8:100::ff"),
				Prefix: pf("2001:db8:100::/120"), Bits: 128, Iface: "auto"}},
		},
		{
			name: "ipv6 span",
			text: "2001:db8::10-2001:db8::1:0",
			want: []config.Range{{Text: "2001:db8::10-2001:db8::1:0", Line: 1, First: a("2001:db8::10"), Last: a("2001:db8::1:0"),
				Bits: 128, Iface: "auto"}},
		},
		{
			name: "options",
			text: "198.18.100.0/24 name=pool-a netmask=24 iface=eth1 auto-assign=true",
			want: []config.Range{{Name: "pool-a", Text: "198.18.100.0/24 name=pool-a netmask=24 iface=eth1 auto-assign=true", Line: 1,
				First: a("198.18.100.0"), Last: a("198.18.100.255"), Prefix: pf("198.18.100.0/24"), Bits: 24, Iface: "eth1", AutoAssign: true}},
		},
		{
			name: "dotted netmask and bare auto-assign",
			text: "198.18.100.0/24 netmask=255.255.255.128 auto-assign",
			want: []config.Range{{Text: "198.18.100.0/24 netmask=255.255.255.128 auto-assign", Line: 1,
				First: a("198.18.100.0"), Last: a("198.18.100.255"), Prefix: pf("198.18.100.0/24"), Bits: 25, Iface: "auto", AutoAssign: true}},
		},
		{
			name: "auto-assign false",
			text: "198.18.100.0/24 auto-assign=false",
			want: []config.Range{{Text: "198.18.100.0/24 auto-assign=false", Line: 1,
				First: a("198.18.100.0"), Last: a("198.18.100.255"), Prefix: pf("198.18.100.0/24"), Bits: 32, Iface: "auto"}},
		},
		{
			name: "namespaces sorted without repeats",
			text: "198.18.100.0/24 namespaces=team-b,team-a,team-b name=b",
			want: []config.Range{{Name: "b", Text: "198.18.100.0/24 namespaces=team-b,team-a,team-b name=b", Line: 1,
				First: a("198.18.100.0"), Last: a("198.18.100.255"), Prefix: pf("198.18.100.0/24"), Bits: 32, Iface: "auto",
				Namespaces: []string{"team-a", "team-b"}}},
		},
		{
			name: "global defaults resolved per family",
			data: map[string]string{"iface": "eth0", "netmask": "24", "netmask6": "64"},
			text: "2001:db8::/120\n198.18.0.0/24\n198.18.1.0/24 iface=eth1 netmask=/16\n2001:db8:1::/120 netmask=112 iface=auto",
			want: []config.Range{
				{Text: "198.18.0.0/24", Line: 2, First: a("198.18.0.0"), Last: a("198.18.0.255"), Prefix: pf("198.18.0.0/24"), Bits: 24, Iface: "eth0"},
				{Text: "198.18.1.0/24 iface=eth1 netmask=/16", Line: 3, First: a("198.18.1.0"), Last: a("198.18.1.255"), Prefix: pf("198.18.1.0/24"),
					Bits: 16, Iface: "eth1"},
				{Text: "2001:db8::/120", Line: 1, First: a("2001:db8::"), Last: a("2001:db8::ff"), Prefix: pf("2001:db8::/120"), Bits: 64, Iface: "eth0"},
				{Text: "2001:db8:1::/120 netmask=112 iface=auto", Line: 4, First: a("2001:db8:1::"), Last: a("2001:db8:1::ff"),
					Prefix: pf("2001:db8:1::/120"), Bits: 112, Iface: "auto"},
			},
		},
		{
			name: "comments blank lines and CRLF, sorted by address",
			text: "# pools\r\n\r\n198.18.5.0/30 # the small one\r\n   \r\n198.18.1.1-198.18.1.2#no space\r\n",
			want: []config.Range{
				{Text: "198.18.1.1-198.18.1.2", Line: 5, First: a("198.18.1.1"), Last: a("198.18.1.2"), Bits: 32, Iface: "auto"},
				{Text: "198.18.5.0/30", Line: 3, First: a("198.18.5.0"), Last: a("198.18.5.3"), Prefix: pf("198.18.5.0/30"), Bits: 32, Iface: "auto"},
			},
		},
		{
			name: "adjacent ranges do not overlap",
			text: "198.18.0.0/25\n198.18.0.128-198.18.0.255\n198.18.1.0",
			want: []config.Range{
				{Text: "198.18.0.0/25", Line: 1, First: a("198.18.0.0"), Last: a("198.18.0.127"), Prefix: pf("198.18.0.0/25"), Bits: 32, Iface: "auto"},
				{Text: "198.18.0.128-198.18.0.255", Line: 2, First: a("198.18.0.128"), Last: a("198.18.0.255"), Bits: 32, Iface: "auto"},
				{Text: "198.18.1.0", Line: 3, First: a("198.18.1.0"), Last: a("198.18.1.0"), Bits: 32, Iface: "auto"},
			},
		},
		{
			name: "huge ranges are fine",
			text: "10.0.0.0/8\n2001:db8::/104 auto-assign",
			want: []config.Range{
				{Text: "10.0.0.0/8", Line: 1, First: a("10.0.0.0"), Last: a("10.255.255.255"), Prefix: pf("10.0.0.0/8"), Bits: 32, Iface: "auto"},
				{Text: "2001:db8::/104 auto-assign", Line: 2, First: a("2001:db8::"), Last: a("2001:db8::ff:ffff"),
					Prefix: pf("2001:db8::/104"), Bits: 128, Iface: "auto", AutoAssign: true},
			},
		},

		// errors
		{name: "host bits", text: "198.18.100.5/24", errors: []string{`ranges line 1 "198.18.100.5/24": 198.18.100.5/24 has host bits set: did you mean 198.18.100.0/24?`}},
		{name: "bad prefix length", text: "198.18.0.0/33", errors: []string{`ranges line 1 "198.18.0.0/33": "198.18.0.0/33" is not a CIDR`}},
		{name: "bad address", text: "\n\n198.18.0.256", errors: []string{`ranges line 3 "198.18.0.256": "198.18.0.256" is not an IP address: write a CIDR`}},
		{name: "hostname", text: "gateway.lan", errors: []string{`ranges line 1 "gateway.lan": "gateway.lan" is not an IP address`}},
		{name: "span reversed", text: "198.18.0.20-198.18.0.10",
			errors: []string{`ranges line 1 "198.18.0.20-198.18.0.10": first address 198.18.0.20 is after last address 198.18.0.10`}},
		{name: "span families", text: "198.18.0.1-2001:db8::1", errors: []string{`198.18.0.1 and 2001:db8::1 are of different families`}},
		{name: "span open", text: "198.18.0.1-", errors: []string{`ranges line 1 "198.18.0.1-": an address is missing`}},
		{name: "span with spaces", text: "198.18.0.1 - 198.18.0.9", errors: []string{`"198.18.0.1 - 198.18.0.9": a span is written without spaces around '-', such as 198.18.100.10-198.18.100.20`}},
		{name: "span with space after", text: "198.18.0.1- 198.18.0.9", errors: []string{`a span is written without spaces around '-'`}},
		{name: "mapped address", text: "::ffff:198.18.0.1", errors: []string{`"::ffff:198.18.0.1": ::ffff:198.18.0.1 is an IPv4-mapped IPv6 address: write 198.18.0.1`}},
		{name: "mapped prefix", text: "::ffff:198.18.0.0/120", errors: []string{`::ffff:198.18.0.0 is an IPv4-mapped IPv6 address: write 198.18.0.0`}},
		{name: "mapped span", text: "2001:db8::1-::ffff:198.18.0.1", errors: []string{`::ffff:198.18.0.1 is an IPv4-mapped IPv6 address`}},
		{name: "mapped inside a span", text: "::fffe:0:0-::1:0:0:0", errors: []string{`includes IPv4-mapped IPv6 addresses (::ffff:0:0/96)`}},
		{name: "zone", text: "fe80::1%eth0", errors: []string{`"fe80::1%eth0" has an IPv6 zone: zones are not allowed`}},
		{name: "zone in prefix", text: "2001:db8::%eth0/64", errors: []string{`"2001:db8::%eth0" has an IPv6 zone`}},
		{name: "catch-all v4", text: "0.0.0.0/0", errors: []string{`includes 0.0.0.0/8 ("this network"): a range may only hold addresses a node can answer for on the LAN`}},
		{name: "catch-all v6", text: "::/0", errors: []string{`includes the unspecified address ::`}},
		{name: "upper half v4", text: "128.0.0.0/1", errors: []string{`includes link-local addresses (169.254.0.0/16)`}},
		{name: "loopback", text: "127.0.0.1", errors: []string{`includes loopback addresses (127.0.0.0/8)`}},
		{name: "loopback v6", text: "::1", errors: []string{`includes the loopback address ::1`}},
		{name: "link-local v6", text: "fe80::/64", errors: []string{`includes link-local addresses (fe80::/10)`}},
		{name: "multicast", text: "239.1.1.1", errors: []string{`includes multicast addresses (224.0.0.0/4)`}},
		{name: "multicast v6", text: "ff02::1", errors: []string{`includes multicast addresses (ff00::/8)`}},
		{name: "broadcast", text: "255.255.255.0/24", errors: []string{`includes the limited broadcast address 255.255.255.255`}},
		{name: "span around loopback", text: "126.255.255.255-128.0.0.0", errors: []string{`includes loopback addresses`}},
		{name: "unknown option", text: "198.18.0.0/24 netmsk=24",
			errors: []string{`ranges line 1 "198.18.0.0/24 netmsk=24": unknown option "netmsk" (did you mean "netmask"?): use name, netmask, iface, auto-assign`}},
		{name: "unknown option no suggestion", text: "198.18.0.0/24 color=red", errors: []string{`unknown option "color": use name,`}},
		{name: "option twice", text: "198.18.0.0/24 iface=a iface=b", errors: []string{`option "iface" is given twice`}},
		{name: "option without value", text: "198.18.0.0/24 iface", errors: []string{`option "iface" has no value: write iface=VALUE`}},
		{name: "bad name", text: "198.18.0.0/24 name=Pool_A", errors: []string{`name "Pool_A" is not a valid name: a lowercase RFC 1123 label`}},
		{name: "empty name", text: "198.18.0.0/24 name=", errors: []string{`name "" is not a valid name`}},
		{name: "bad netmask", text: "198.18.0.0/24 netmask=4", errors: []string{`netmask "4" is out of range: use a prefix length from 8 to 32`}},
		{name: "dotted netmask on v6", text: "2001:db8::/120 netmask=255.255.255.0", errors: []string{`netmask "255.255.255.0" is not a netmask: use a prefix length from 1 to 128`}},
		{name: "bad netmask v6", text: "2001:db8::/120 netmask=129", errors: []string{`netmask "129" is out of range`}},
		{name: "bad iface", text: "198.18.0.0/24 iface=averyveryverylongname", errors: []string{`iface "averyveryverylongname" is longer than 15 bytes`}},
		{name: "bad auto-assign", text: "198.18.0.0/24 auto-assign=yes", errors: []string{`auto-assign "yes" is not a boolean: use true or false`}},
		{name: "namespaces empty", text: "198.18.0.0/24 namespaces=",
			errors: []string{`namespaces "": "" is not a namespace name: a lowercase RFC 1123 label must consist of`, `write namespaces=NAME[,NAME...]`}},
		{name: "namespaces with space", text: "198.18.0.0/24 namespaces=a, b", errors: []string{`namespaces "a,": "" is not a namespace name`, `without spaces`}},
		{name: "namespaces bad name", text: "198.18.0.0/24 namespaces=a,Team_B", errors: []string{`namespaces "a,Team_B": "Team_B" is not a namespace name`}},
		{name: "namespaces trailing comma", text: "198.18.0.0/24 namespaces=a,", errors: []string{`namespaces "a,": "" is not a namespace name`}},
		{name: "duplicate names", text: "198.18.0.0/24 name=a\n198.18.1.0/24 name=b\n198.18.2.0/24 name=a",
			errors: []string{`ranges line 3 "198.18.2.0/24 name=a": name "a" is already used on line 1`}},
		{name: "overlap", text: "198.18.0.0/24\n198.18.0.128-198.18.1.5",
			errors: []string{`ranges line 2 "198.18.0.128-198.18.1.5" overlaps line 1 "198.18.0.0/24"`}},
		{name: "overlap written first", text: "198.18.0.200-198.18.0.210\n198.18.0.0/24",
			errors: []string{`ranges line 2 "198.18.0.0/24" overlaps line 1 "198.18.0.200-198.18.0.210"`}},
		{name: "overlap at one address", text: "198.18.0.0-198.18.0.10\n198.18.0.10-198.18.0.20",
			errors: []string{`ranges line 2 "198.18.0.10-198.18.0.20" overlaps line 1 "198.18.0.0-198.18.0.10"`}},
		{name: "identical ranges", text: "2001:db8::/120\n2001:db8::/120 name=again",
			errors: []string{`ranges line 2 "2001:db8::/120 name=again" overlaps line 1 "2001:db8::/120"`}},
		{name: "overlap reaching over a middle range", text: "198.18.0.0/16\n198.18.1.0/24\n198.18.9.9",
			errors: []string{`ranges line 2 "198.18.1.0/24" overlaps line 1 "198.18.0.0/16"`, `ranges line 3 "198.18.9.9" overlaps line 1 "198.18.0.0/16"`}},
		{name: "every bad line reported", text: "x\n198.18.0.0/24\ny",
			errors: []string{`ranges line 1 "x"`, `ranges line 3 "y"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := map[string]string{"ranges": tc.text}
			for k, v := range tc.data {
				data[k] = v
			}
			got, err := config.Parse(data)
			if tc.errors != nil {
				for _, e := range tc.errors {
					assert.ErrorContains(t, err, e)
				}
				return
			}
			assert.NilError(t, err)
			assert.Equal(t, len(got.Ranges), len(tc.want), "%+v", got.Ranges)
			for i := range tc.want {
				assert.Assert(t, reflect.DeepEqual(got.Ranges[i], tc.want[i]), "got  %+v\nwant %+v", got.Ranges[i], tc.want[i])
			}
		})
	}
}

func TestRangeContains(t *testing.T) {
	c, err := config.Parse(map[string]string{"ranges": "198.18.0.10-198.18.0.20\n2001:db8::/126"})
	assert.NilError(t, err)
	v4, v6 := c.Ranges[0], c.Ranges[1]
	for _, tc := range []struct {
		r    config.Range
		ip   string
		want bool
	}{
		{v4, "198.18.0.10", true},
		{v4, "198.18.0.15", true},
		{v4, "198.18.0.20", true},
		{v4, "198.18.0.9", false},
		{v4, "198.18.0.21", false},
		{v4, "::ffff:198.18.0.15", false},
		{v4, "2001:db8::1", false},
		{v6, "2001:db8::", true},
		{v6, "2001:db8::3", true},
		{v6, "2001:db8::4", false},
		{v6, "2001:db8::1%eth0", false},
		{v6, "198.18.0.15", false},
	} {
		assert.Equal(t, tc.r.Contains(a(tc.ip)), tc.want, "%s in %s", tc.ip, tc.r)
	}
	assert.Assert(t, !v4.Contains(netip.Addr{}))
}

func TestRangeAllows(t *testing.T) {
	c, err := config.Parse(map[string]string{"ranges": "198.18.0.0/24\n198.18.1.0/24 namespaces=team-b,team-a name=shared\n198.18.2.7 namespaces=team-a"})
	assert.NilError(t, err)
	open, shared, one := c.Ranges[0], c.Ranges[1], c.Ranges[2]
	assert.Check(t, open.Allows("anyone"))
	assert.Check(t, shared.Allows("team-a") && shared.Allows("team-b"))
	assert.Check(t, !shared.Allows("team-c") && !shared.Allows(""))
	assert.Check(t, one.Allows("team-a") && !one.Allows("team-b"))
	assert.Equal(t, shared.NotFor("team-c"), "range shared is only for namespaces team-a, team-b, not team-c")
	assert.Equal(t, one.NotFor("team-b"), `range "198.18.2.7 namespaces=team-a" is only for namespace team-a, not team-b`)
}

func TestRangeUnusable(t *testing.T) {
	c, err := config.Parse(map[string]string{"ranges": "198.18.0.0/24\n198.18.1.0/31\n198.18.1.4/32\n198.18.2.0-198.18.2.255\n2001:db8::/120"})
	assert.NilError(t, err)
	for _, tc := range []struct {
		ip   string
		want string
	}{
		{"198.18.0.0", `the network address of range "198.18.0.0/24"`},
		{"198.18.0.255", `the broadcast address of range "198.18.0.0/24"`},
		{"198.18.0.1", ""},
		{"198.18.0.254", ""},
		{"198.18.1.0", ""}, // RFC 3021: both addresses of a /31 are hosts
		{"198.18.1.1", ""},
		{"198.18.1.4", ""},
		{"198.18.2.0", ""}, // a span says exactly which addresses to use
		{"198.18.2.255", ""},
		{"2001:db8::", ""}, // IPv6 has no broadcast; the subnet-router anycast is the operator's call
		{"2001:db8::ff", ""},
	} {
		b, ok := c.Lookup(a(tc.ip))
		assert.Assert(t, ok, tc.ip)
		assert.Equal(t, b.Range.Unusable(a(tc.ip)), tc.want, tc.ip)
	}
}

func TestLookup(t *testing.T) {
	c, err := config.Parse(map[string]string{
		"iface":    "eth0",
		"netmask":  "24",
		"netmask6": "64",
		"ranges": `
			198.18.200.0/24 name=last
			198.18.0.0/24 name=first iface=eth1 netmask=16
			198.18.100.10-198.18.100.20
			2001:db8:1::/120 name=v6
			2001:db8::5
		`,
	})
	assert.NilError(t, err)
	for _, tc := range []struct {
		ip    string
		name  string // "" with ok: the unnamed range starting at first
		first string
		iface string
		bits  int
		ok    bool
	}{
		{ip: "198.18.0.0", name: "first", first: "198.18.0.0", iface: "eth1", bits: 16, ok: true},
		{ip: "198.18.0.77", name: "first", first: "198.18.0.0", iface: "eth1", bits: 16, ok: true},
		{ip: "198.18.0.255", name: "first", first: "198.18.0.0", iface: "eth1", bits: 16, ok: true},
		{ip: "198.18.1.0"},
		{ip: "198.18.100.9"},
		{ip: "198.18.100.10", first: "198.18.100.10", iface: "eth0", bits: 24, ok: true},
		{ip: "198.18.100.20", first: "198.18.100.10", iface: "eth0", bits: 24, ok: true},
		{ip: "198.18.100.21"},
		{ip: "198.18.200.128", name: "last", first: "198.18.200.0", iface: "eth0", bits: 24, ok: true},
		{ip: "198.18.201.0"},
		{ip: "1.1.1.1"},
		{ip: "255.255.255.255"},
		{ip: "::ffff:198.18.0.77"},
		{ip: "::"},
		{ip: "2001:db8::4"},
		{ip: "2001:db8::5", first: "2001:db8::5", iface: "eth0", bits: 64, ok: true},
		{ip: "2001:db8::6"},
		{ip: "2001:db8:1::ff", name: "v6", first: "2001:db8:1::", iface: "eth0", bits: 64, ok: true},
		{ip: "2001:db8:1::100"},
		{ip: "2001:db8:1::1%eth0"},
	} {
		b, ok := c.Lookup(a(tc.ip))
		assert.Equal(t, ok, tc.ok, tc.ip)
		if !ok {
			assert.Assert(t, b.Range == nil)
			continue
		}
		assert.Equal(t, b.Range.Name, tc.name, tc.ip)
		assert.Equal(t, b.Range.First, a(tc.first), tc.ip)
		assert.Equal(t, b.Iface, tc.iface, tc.ip)
		assert.Equal(t, b.Bits, tc.bits, tc.ip)
		assert.Equal(t, b.Prefix(a(tc.ip)), netip.PrefixFrom(a(tc.ip), tc.bits))
	}
	_, ok := c.Lookup(netip.Addr{})
	assert.Assert(t, !ok)
	_, ok = config.Default().Lookup(a("198.18.0.1"))
	assert.Assert(t, !ok, "no ranges, nothing is managed")
}

func TestLookupPointsIntoConfig(t *testing.T) {
	c, err := config.Parse(map[string]string{"ranges": "198.18.0.0/24 name=a"})
	assert.NilError(t, err)
	b, ok := c.Lookup(a("198.18.0.1"))
	assert.Assert(t, ok)
	assert.Assert(t, b.Range == &c.Ranges[0])
}

func TestBindingEqual(t *testing.T) {
	old, err := config.Parse(map[string]string{"ranges": "198.18.0.0/24 iface=eth0\n198.18.1.0/24 netmask=24"})
	assert.NilError(t, err)
	edited, err := config.Parse(map[string]string{"ranges": "# moved\n198.18.0.0/23 iface=eth1\n"})
	assert.NilError(t, err)
	before, _ := old.Lookup(a("198.18.0.9"))
	after, _ := edited.Lookup(a("198.18.0.9"))
	assert.Assert(t, !before.Equal(after), "iface changed")
	before, _ = old.Lookup(a("198.18.1.9"))
	after, _ = edited.Lookup(a("198.18.1.9"))
	assert.Assert(t, !before.Equal(after), "mask changed")

	same, err := config.Parse(map[string]string{"iface": "eth0", "ranges": "198.18.0.0-198.18.0.100 name=renamed"})
	assert.NilError(t, err)
	before, _ = old.Lookup(a("198.18.0.9"))
	after, _ = same.Lookup(a("198.18.0.9"))
	assert.Assert(t, before.Equal(after), "same iface and mask, whatever the range looks like")
}

func TestConfigEqual(t *testing.T) {
	base := map[string]string{"ranges": "198.18.0.0/24\n198.18.1.0/24", "node-selector": "a=b,c"}
	parse := func(edit func(map[string]string)) config.Config {
		t.Helper()
		d := map[string]string{}
		for k, v := range base {
			d[k] = v
		}
		edit(d)
		c, err := config.Parse(d)
		assert.NilError(t, err)
		return c
	}
	c := parse(func(map[string]string) {})
	assert.Assert(t, c.Equal(c))
	for name, edit := range map[string]func(map[string]string){
		"comments and order": func(d map[string]string) { d["ranges"] = "# x\n198.18.1.0/24 # y\n198.18.0.0/24" },
		"unknown key":        func(d map[string]string) { d["extra"] = "1" },
		"selector spelling":  func(d map[string]string) { d["node-selector"] = " c , a=b" },
		"default spelled":    func(d map[string]string) { d["policy"], d["lease-duration"] = "sticky", "2000ms" },
	} {
		assert.Assert(t, c.Equal(parse(edit)), name)
	}
	for name, edit := range map[string]func(map[string]string){
		"iface":      func(d map[string]string) { d["iface"] = "eth0" },
		"netmask":    func(d map[string]string) { d["netmask"] = "24" },
		"netmask6":   func(d map[string]string) { d["netmask6"] = "64" },
		"policy":     func(d map[string]string) { d["policy"] = "spread" },
		"selector":   func(d map[string]string) { d["node-selector"] = "a=b" },
		"lease":      func(d map[string]string) { d["lease-duration"] = "3s" },
		"renew":      func(d map[string]string) { d["renew-interval"] = "1s" },
		"api-loss":   func(d map[string]string) { d["api-loss"] = "fence" },
		"fence":      func(d map[string]string) { d["fence-after"] = "1s" },
		"preferred":  func(d map[string]string) { d["preferred-nodes"] = "n1" },
		"range":      func(d map[string]string) { d["ranges"] = "198.18.0.0/24" },
		"auto":       func(d map[string]string) { d["ranges"] = "198.18.0.0/24 auto-assign\n198.18.1.0/24" },
		"name":       func(d map[string]string) { d["ranges"] = "198.18.0.0/24 name=x\n198.18.1.0/24" },
		"span":       func(d map[string]string) { d["ranges"] = "198.18.0.0-198.18.0.255\n198.18.1.0/24" },
		"namespaces": func(d map[string]string) { d["ranges"] = "198.18.0.0/24 namespaces=a\n198.18.1.0/24" },
		"external":   func(d map[string]string) { d["external-ips"] = "off" },
	} {
		assert.Assert(t, !c.Equal(parse(edit)), name)
	}
	assert.Assert(t, !c.Equal(config.Config{}))
	assert.Assert(t, config.Config{}.Equal(config.Config{}))
}

func TestAddressLifetime(t *testing.T) {
	for _, tc := range []struct {
		lease, renew, want time.Duration
	}{
		{2 * time.Second, 500 * time.Millisecond, time.Second},
		{time.Second, 500 * time.Millisecond, time.Second},
		{time.Second, 100 * time.Millisecond, time.Second},
		{3 * time.Second, time.Second, 2 * time.Second},
		{10 * time.Second, 500 * time.Millisecond, 9 * time.Second},
		{10 * time.Second, 5 * time.Second, 5 * time.Second},
	} {
		c := config.Default()
		c.LeaseDuration, c.RenewInterval = tc.lease, tc.renew
		assert.Equal(t, c.AddressLifetime(), tc.want, "lease %v renew %v", tc.lease, tc.renew)
	}
}

func TestRankStep(t *testing.T) {
	for _, tc := range []struct {
		renew, want time.Duration
	}{
		{100 * time.Millisecond, 50 * time.Millisecond},
		{200 * time.Millisecond, 100 * time.Millisecond},
		{500 * time.Millisecond, 250 * time.Millisecond},
		{2 * time.Second, 250 * time.Millisecond},
	} {
		c := config.Default()
		c.RenewInterval = tc.renew
		assert.Equal(t, c.RankStep(), tc.want, "renew %v", tc.renew)
	}
}

func TestCheckReserved(t *testing.T) {
	c, err := config.Parse(map[string]string{"ranges": "198.18.0.0/24\n\n2001:db8::/120"})
	assert.NilError(t, err)
	assert.NilError(t, c.CheckReserved(nil))
	assert.NilError(t, c.CheckReserved(map[netip.Addr]string{a("198.18.1.1"): "node-a", a("2001:db8::100"): "node-b"}))
	err = c.CheckReserved(map[netip.Addr]string{
		a("2001:db8::7"):  config.NodeAddress("node-b"),
		a("198.18.0.1"):   config.APIServerAddress,
		a("198.18.9.9"):   config.NodeAddress("node-c"),
		a("198.18.0.200"): config.NodeAddress(""),
	})
	assert.Error(t, err, `ranges line 1 "198.18.0.0/24" contains 198.18.0.1, an address of the API server`+"\n"+
		`ranges line 1 "198.18.0.0/24" contains 198.18.0.200, a node's own address`+"\n"+
		`ranges line 3 "2001:db8::/120" contains 2001:db8::7, the address of node "node-b"`)
}

func TestUnusable(t *testing.T) {
	for _, tc := range []struct {
		ip, want string
	}{
		{"198.18.0.1", ""},
		{"2001:db8::1", ""},
		{"10.1.2.3", ""},
		{"0.0.0.0", `an address of 0.0.0.0/8 ("this network")`},
		{"0.1.2.3", `an address of 0.0.0.0/8 ("this network")`},
		{"127.0.0.1", "a loopback address"},
		{"127.255.0.1", "a loopback address"},
		{"169.254.1.1", "a link-local address"},
		{"224.0.0.1", "a multicast address"},
		{"239.255.255.255", "a multicast address"},
		{"255.255.255.255", "the limited broadcast address"},
		{"::", "the unspecified address"},
		{"::1", "a loopback address"},
		{"fe80::1", "a link-local address"},
		{"fe80::1%eth0", "an address with an IPv6 zone"},
		{"ff02::1", "a multicast address"},
		{"::ffff:198.18.0.1", "an IPv4-mapped IPv6 address (write 198.18.0.1)"},
	} {
		assert.Equal(t, config.Unusable(a(tc.ip)), tc.want, tc.ip)
	}
	assert.Equal(t, config.Unusable(netip.Addr{}), "not an IP address")
}

func TestNodeAddress(t *testing.T) {
	assert.Equal(t, config.NodeAddress("n1"), `the address of node "n1"`)
	assert.Equal(t, config.NodeAddress(""), "a node's own address")
}

// TestExample keeps the documented example ConfigMap valid.
func TestExample(t *testing.T) {
	raw, err := os.ReadFile("testdata/eip-config.yaml")
	assert.NilError(t, err)
	var cm corev1.ConfigMap
	assert.NilError(t, yaml.UnmarshalStrict(raw, &cm))
	c, err := config.Parse(cm.Data)
	assert.NilError(t, err)
	assert.Equal(t, len(c.Warnings), 0, "%v", c.Warnings)
	assert.Equal(t, c.Policy, config.PolicySpread)
	assert.Equal(t, c.APILoss, config.APILossHold)
	assert.Equal(t, c.LeaseDuration, 2*time.Second)
	assert.DeepEqual(t, c.PreferredNodes, []string{"node-a", "node-b"})
	var names []string
	for _, r := range c.Ranges {
		names = append(names, r.Name)
	}
	assert.DeepEqual(t, names, []string{"pool-a", "", "static", "pool-v6"})
	b, ok := c.Lookup(a("2001:db8:100::10"))
	assert.Assert(t, ok)
	assert.Equal(t, b.Iface, "eth1")
	assert.Equal(t, b.Bits, 64)
	assert.Assert(t, b.Range.AutoAssign)
}
