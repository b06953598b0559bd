package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/eip-project/eip/internal/config"
)

func TestParseEmptyIsDefault(t *testing.T) {
	for _, data := range []map[string]string{
		nil,
		{},
		{"policy": "", "ranges": "  \n# nothing yet\n\n", "lease-duration": " \t"},
	} {
		got, err := config.Parse(data)
		assert.NilError(t, err)
		assertConfig(t, got, config.Default())
		assert.Equal(t, len(got.Ranges), 0)
	}
}

func TestDefault(t *testing.T) {
	d := config.Default()
	assert.Equal(t, d.Iface, "auto")
	assert.Equal(t, d.Netmask4, 32)
	assert.Equal(t, d.Netmask6, 128)
	assert.Equal(t, d.Policy, config.PolicySticky)
	assert.Assert(t, d.NodeSelector.Empty())
	assert.Equal(t, d.LeaseDuration, 2*time.Second)
	assert.Equal(t, d.RenewInterval, 500*time.Millisecond)
	assert.Equal(t, d.APILoss, config.APILossHold)
	assert.Equal(t, d.FenceAfter, 1500*time.Millisecond)
	assert.Equal(t, d.LivenessPort, uint16(9403))
	assert.Assert(t, d.LANLiveness())
	assert.Equal(t, len(d.PreferredNodes), 0)
}

// assertConfig compares everything Config.Equal compares, and the warnings.
func assertConfig(t *testing.T, got, want config.Config) {
	t.Helper()
	assert.Assert(t, got.Equal(want), "got  %+v\nwant %+v", got, want)
	assert.DeepEqual(t, got.Warnings, want.Warnings)
}

func TestParseKeys(t *testing.T) {
	tests := []struct {
		name string
		data map[string]string
		// want edits Default() into the expected Config; nil when an error is expected.
		want func(c *config.Config)
		err  []string
	}{
		// iface
		{name: "iface name", data: map[string]string{"iface": "eth1"}, want: func(c *config.Config) { c.Iface = "eth1" }},
		{name: "iface trimmed", data: map[string]string{"iface": " bond0.100\n"}, want: func(c *config.Config) { c.Iface = "bond0.100" }},
		{name: "iface auto", data: map[string]string{"iface": "auto"}, want: func(*config.Config) {}},
		{name: "iface 15 bytes", data: map[string]string{"iface": "abcdefghijklmno"}, want: func(c *config.Config) { c.Iface = "abcdefghijklmno" }},
		{name: "iface too long", data: map[string]string{"iface": "abcdefghijklmnop"},
			err: []string{`iface "abcdefghijklmnop" is longer than 15 bytes: use an interface name`}},
		{name: "iface label", data: map[string]string{"iface": "eth0:1"}, err: []string{`iface "eth0:1" contains '/', ':' or a space`}},
		{name: "iface slash", data: map[string]string{"iface": "a/b"}, err: []string{`iface "a/b" contains '/'`}},
		{name: "iface space", data: map[string]string{"iface": "eth 0"}, err: []string{`iface "eth 0" contains`}},
		{name: "iface dot", data: map[string]string{"iface": ".."}, err: []string{`iface ".." is not an interface name`}},

		// netmask
		{name: "netmask length", data: map[string]string{"netmask": "24"}, want: func(c *config.Config) { c.Netmask4 = 24 }},
		{name: "netmask slash", data: map[string]string{"netmask": "/26"}, want: func(c *config.Config) { c.Netmask4 = 26 }},
		{name: "netmask dotted", data: map[string]string{"netmask": " 255.255.255.0 "}, want: func(c *config.Config) { c.Netmask4 = 24 }},
		{name: "netmask dotted 32", data: map[string]string{"netmask": "255.255.255.255"}, want: func(*config.Config) {}},
		{name: "netmask dotted 8", data: map[string]string{"netmask": "255.0.0.0"}, want: func(c *config.Config) { c.Netmask4 = 8 }},
		{name: "netmask too short", data: map[string]string{"netmask": "7"},
			err: []string{`netmask "7" is out of range: use a prefix length from 8 to 32 or a dotted mask such as "255.255.255.0"`}},
		{name: "netmask zero", data: map[string]string{"netmask": "0"}, err: []string{`netmask "0" is out of range`}},
		{name: "netmask dotted zero", data: map[string]string{"netmask": "0.0.0.0"}, err: []string{`netmask "0.0.0.0" is out of range`}},
		{name: "netmask too long", data: map[string]string{"netmask": "33"}, err: []string{`netmask "33" is out of range`}},
		{name: "netmask gaps", data: map[string]string{"netmask": "255.0.255.0"}, err: []string{`netmask "255.0.255.0" is not a contiguous netmask`}},
		{name: "netmask words", data: map[string]string{"netmask": "big"}, err: []string{`netmask "big" is not a netmask`}},
		{name: "netmask short dotted", data: map[string]string{"netmask": "255.255.0"}, err: []string{`netmask "255.255.0" is not a netmask`}},
		{name: "netmask ipv6", data: map[string]string{"netmask": "ffff::"}, err: []string{`netmask "ffff::" is not a netmask`}},

		// netmask6
		{name: "netmask6 64", data: map[string]string{"netmask6": "64"}, want: func(c *config.Config) { c.Netmask6 = 64 }},
		{name: "netmask6 slash", data: map[string]string{"netmask6": "/120"}, want: func(c *config.Config) { c.Netmask6 = 120 }},
		{name: "netmask6 1", data: map[string]string{"netmask6": "1"}, want: func(c *config.Config) { c.Netmask6 = 1 }},
		{name: "netmask6 zero", data: map[string]string{"netmask6": "0"},
			err: []string{`netmask6 "0" is out of range: use a prefix length from 1 to 128`}},
		{name: "netmask6 129", data: map[string]string{"netmask6": "129"}, err: []string{`netmask6 "129" is out of range`}},
		{name: "netmask6 dotted", data: map[string]string{"netmask6": "255.255.255.0"}, err: []string{`netmask6 "255.255.255.0" is not a netmask`}},

		// policy
		{name: "policy spread", data: map[string]string{"policy": "spread"}, want: func(c *config.Config) { c.Policy = config.PolicySpread }},
		{name: "policy sticky", data: map[string]string{"policy": "sticky "}, want: func(*config.Config) {}},
		{name: "policy case", data: map[string]string{"policy": "Sticky"},
			err: []string{`policy "Sticky" is not a policy: use "sticky" or "spread"`}},

		// node-selector
		{name: "selector", data: map[string]string{"node-selector": "zone in (a,b), !no-eip"},
			want: func(c *config.Config) { c.NodeSelector = mustSelector(t, "zone in (a,b),!no-eip") }},
		{name: "selector bad", data: map[string]string{"node-selector": "zone a"},
			err: []string{`node-selector "zone a" is not a label selector (`, `use kubectl syntax such as "zone=a,!no-eip"`}},
		{name: "selector bad value", data: map[string]string{"node-selector": "zone=a b"}, err: []string{`node-selector "zone=a b" is not a label selector`}},

		// lease-duration
		{name: "lease go", data: map[string]string{"lease-duration": "4s"},
			want: func(c *config.Config) { c.LeaseDuration, c.FenceAfter = 4*time.Second, 3*time.Second }},
		{name: "lease seconds", data: map[string]string{"lease-duration": "10"},
			want: func(c *config.Config) { c.LeaseDuration, c.FenceAfter = 10*time.Second, 7500*time.Millisecond }},
		{name: "lease fractional seconds", data: map[string]string{"lease-duration": "1.5"},
			want: func(c *config.Config) { c.LeaseDuration, c.FenceAfter = 1500*time.Millisecond, 1125*time.Millisecond }},
		{name: "lease ms", data: map[string]string{"lease-duration": "1000ms"},
			want: func(c *config.Config) { c.LeaseDuration, c.FenceAfter = time.Second, 750*time.Millisecond }},
		{name: "lease 1h", data: map[string]string{"lease-duration": "1h"},
			want: func(c *config.Config) { c.LeaseDuration, c.FenceAfter = time.Hour, 45*time.Minute }},
		{name: "lease words", data: map[string]string{"lease-duration": "two seconds"},
			err: []string{`lease-duration "two seconds" is not a duration: use a Go duration such as "2s" or "1500ms", or seconds such as "2"`}},
		{name: "lease exponent", data: map[string]string{"lease-duration": "1e3"}, err: []string{`lease-duration "1e3" is not a duration`}},
		{name: "lease two dots", data: map[string]string{"lease-duration": "1.2.3"}, err: []string{`lease-duration "1.2.3" is not a duration`}},
		{name: "lease zero", data: map[string]string{"lease-duration": "0"}, err: []string{`lease-duration "0" must be positive`}},
		{name: "lease negative", data: map[string]string{"lease-duration": "-2s"}, err: []string{`lease-duration "-2s" must be positive`}},
		{name: "lease short", data: map[string]string{"lease-duration": "900ms"},
			err: []string{`lease-duration "900ms" must be at least 1s: bound addresses live whole seconds`}},
		{name: "lease long", data: map[string]string{"lease-duration": "61m"}, err: []string{`lease-duration "61m" must be at most 1h0m0s`}},
		{name: "lease overflow", data: map[string]string{"lease-duration": "99999999999999999999"}, err: []string{`lease-duration "99999999999999999999" is not a duration`}},

		// renew-interval
		{name: "renew half", data: map[string]string{"renew-interval": "1s"}, want: func(c *config.Config) { c.RenewInterval = time.Second }},
		{name: "renew seconds", data: map[string]string{"renew-interval": "0.25"}, want: func(c *config.Config) { c.RenewInterval = 250 * time.Millisecond }},
		{name: "renew min", data: map[string]string{"renew-interval": "100ms"}, want: func(c *config.Config) { c.RenewInterval = 100 * time.Millisecond }},
		{name: "renew longer than lease", data: map[string]string{"renew-interval": "3s"},
			err: []string{`renew-interval "3s" must be shorter than lease-duration "2s": at most half of it, so that one late renewal does not make a live node look dead`}},
		{name: "renew equal to lease", data: map[string]string{"renew-interval": "2s", "lease-duration": "2"},
			err: []string{`renew-interval "2s" must be shorter than lease-duration "2"`}},
		{name: "renew over half", data: map[string]string{"renew-interval": "1100ms"},
			err: []string{`renew-interval "1100ms" must be at most half of lease-duration "2s", so that one late renewal`}},
		{name: "renew against bad lease", data: map[string]string{"renew-interval": "5s", "lease-duration": "x"},
			err: []string{`lease-duration "x" is not a duration`}},
		{name: "renew too fast", data: map[string]string{"renew-interval": "50ms"},
			err: []string{`renew-interval "50ms" must be at least 100ms: every node writes its heartbeat once per renew-interval`}},
		{name: "renew zero", data: map[string]string{"renew-interval": "0s"}, err: []string{`renew-interval "0s" must be positive`}},
		{name: "renew negative", data: map[string]string{"renew-interval": "-1"}, err: []string{`renew-interval "-1" is not a duration`}},
		{name: "renew words", data: map[string]string{"renew-interval": "fast"}, err: []string{`renew-interval "fast" is not a duration`}},

		// api-loss and fence-after
		{name: "api-loss fence", data: map[string]string{"api-loss": "fence"}, want: func(c *config.Config) { c.APILoss = config.APILossFence }},
		{name: "api-loss hold", data: map[string]string{"api-loss": "hold"}, want: func(*config.Config) {}},
		{name: "api-loss bad", data: map[string]string{"api-loss": "panic"}, err: []string{`api-loss "panic" is not supported: use "hold" or "fence"`}},
		{name: "fence-after", data: map[string]string{"api-loss": "fence", "fence-after": "1s"},
			want: func(c *config.Config) { c.APILoss, c.FenceAfter = config.APILossFence, time.Second }},
		{name: "fence-after follows lease", data: map[string]string{"api-loss": "fence", "lease-duration": "8s", "renew-interval": "2s"},
			want: func(c *config.Config) {
				c.APILoss, c.LeaseDuration, c.RenewInterval, c.FenceAfter = config.APILossFence, 8*time.Second, 2*time.Second, 6*time.Second
			}},
		{name: "fence-after with hold", data: map[string]string{"fence-after": "1s"},
			want: func(c *config.Config) {
				c.FenceAfter = time.Second
				c.Warnings = []string{`fence-after has no effect unless api-loss is "fence"`}
			}},
		{name: "fence-after equal to lease", data: map[string]string{"api-loss": "fence", "fence-after": "2s"},
			err: []string{`fence-after "2s" must be shorter than lease-duration "2s": a fencing node must unbind before peers may take its IPs over`}},
		{name: "fence-after before renewal", data: map[string]string{"api-loss": "fence", "fence-after": "500ms"},
			err: []string{`fence-after "500ms" must be longer than renew-interval "500ms": otherwise a healthy node fences between two renewals`}},
		{name: "fence-after bad", data: map[string]string{"fence-after": "soon"}, err: []string{`fence-after "soon" is not a duration`}},

		// liveness-port
		{name: "liveness port", data: map[string]string{"liveness-port": "17946"}, want: func(c *config.Config) { c.LivenessPort = 17946 }},
		{name: "liveness off", data: map[string]string{"liveness-port": "off"}, want: func(c *config.Config) { c.LivenessPort = 0 }},
		{name: "liveness zero", data: map[string]string{"liveness-port": "0"}, want: func(c *config.Config) { c.LivenessPort = 0 }},
		{name: "liveness privileged", data: map[string]string{"liveness-port": "80"},
			err: []string{`liveness-port "80" is not a port: use a UDP port from 1024 to 65535 (eipd binds it without privileges), or "off"`}},
		{name: "liveness too big", data: map[string]string{"liveness-port": "65536"}, err: []string{`liveness-port "65536" is not a port`}},
		{name: "liveness words", data: map[string]string{"liveness-port": "udp"}, err: []string{`liveness-port "udp" is not a port`}},
		{name: "liveness with fence", data: map[string]string{"api-loss": "fence", "liveness-port": "9403"},
			want: func(c *config.Config) {
				c.APILoss = config.APILossFence
				c.Warnings = []string{`liveness-port has no effect with api-loss "fence": fencing is timed against heartbeats renewed every renew-interval, so liveness is judged from them alone`}
			}},

		// announce-interval
		{name: "announce interval", data: map[string]string{"announce-interval": "5m"}, want: func(c *config.Config) { c.AnnounceInterval = 5 * time.Minute }},
		{name: "announce interval in seconds", data: map[string]string{"announce-interval": "30"}, want: func(c *config.Config) { c.AnnounceInterval = 30 * time.Second }},
		{name: "announce interval off", data: map[string]string{"announce-interval": "off"}, want: func(c *config.Config) {}},
		// heartbeat-writes
		{name: "heartbeat writes", data: map[string]string{"heartbeat-writes": "10"}, want: func(c *config.Config) { c.HeartbeatWrites = 10 }},
		{name: "heartbeat writes fraction", data: map[string]string{"heartbeat-writes": "0.5"}, want: func(c *config.Config) { c.HeartbeatWrites = 0.5 }},
		{name: "heartbeat writes too few", data: map[string]string{"heartbeat-writes": "0.01"},
			err: []string{`heartbeat-writes "0.01" is not a number of writes a second from 0.1 to 1000`}},
		{name: "heartbeat writes words", data: map[string]string{"heartbeat-writes": "NaN"}, err: []string{`heartbeat-writes "NaN" is not a number`}},
		{name: "heartbeat writes without the LAN", data: map[string]string{"liveness-port": "off", "heartbeat-writes": "2"},
			want: func(c *config.Config) {
				c.LivenessPort, c.HeartbeatWrites = 0, 2
				c.Warnings = []string{`heartbeat-writes has no effect without liveness over the LAN (liveness-port off, or api-loss "fence"): every heartbeat is renewed every renew-interval`}
			}},

		// external-ips
		{name: "external-ips off", data: map[string]string{"external-ips": " off"}, want: func(c *config.Config) { c.ExternalIPs = false }},
		{name: "external-ips on", data: map[string]string{"external-ips": "on"}, want: func(*config.Config) {}},
		{name: "external-ips bool", data: map[string]string{"external-ips": "false"},
			err: []string{`external-ips "false" is not a switch: use "on" (spec.externalIPs and LoadBalancer addresses) or "off" (LoadBalancer addresses only)`}},

		// port-filter
		{name: "port-filter off", data: map[string]string{"port-filter": "off"}, want: func(c *config.Config) { c.PortFilter = false }},
		{name: "port-filter on", data: map[string]string{"port-filter": "on"}, want: func(*config.Config) {}},
		{name: "port-filter yes", data: map[string]string{"port-filter": "yes"},
			err: []string{`port-filter "yes" is not a switch: use "on" (an external IP opens only its Services' ports) or "off" (every port of the node)`}},

		// load-balancer-class
		{name: "class only", data: map[string]string{"load-balancer-class": "only "}, want: func(c *config.Config) { c.LoadBalancerClass = config.ClassOnly }},
		{name: "class any", data: map[string]string{"load-balancer-class": "any"}, want: func(*config.Config) {}},
		{name: "class name", data: map[string]string{"load-balancer-class": "eip.io/eip"},
			err: []string{`load-balancer-class "eip.io/eip" is not supported: use "any" (LoadBalancer Services without a class and those of class eip.io/eip) or "only" (class eip.io/eip only)`}},

		// preferred-nodes
		{name: "preferred", data: map[string]string{"preferred-nodes": "node-b, node-a\n\tnode-c.example.com,,"},
			want: func(c *config.Config) { c.PreferredNodes = []string{"node-b", "node-a", "node-c.example.com"} }},
		{name: "preferred repeated", data: map[string]string{"preferred-nodes": "a b a"},
			want: func(c *config.Config) {
				c.PreferredNodes = []string{"a", "b"}
				c.Warnings = []string{`preferred-nodes lists "a" more than once; its first place counts`}
			}},
		{name: "preferred bad name", data: map[string]string{"preferred-nodes": "a Node_B"},
			err: []string{`preferred-nodes: "Node_B" is not a node name: a lowercase RFC 1123 subdomain`}},

		// unknown keys
		{name: "unknown misspelt", data: map[string]string{"polcy": "spread"},
			want: func(c *config.Config) { c.Warnings = []string{`unknown key "polcy" ignored (did you mean "policy"?)`} }},
		{name: "unknown camel case", data: map[string]string{"leaseDuration": "3s", "renewinterval": "1s"},
			want: func(c *config.Config) {
				c.Warnings = []string{
					`unknown key "leaseDuration" ignored (did you mean "lease-duration"?)`,
					`unknown key "renewinterval" ignored (did you mean "renew-interval"?)`,
				}
			}},
		{name: "unknown unrelated", data: map[string]string{"colour": "blue"},
			want: func(c *config.Config) { c.Warnings = []string{`unknown key "colour" ignored`} }},

		// several errors at once
		{name: "errors joined", data: map[string]string{"policy": "x", "api-loss": "y", "netmask": "40", "ranges": "198.18.0.0/33"},
			err: []string{`netmask "40" is out of range`, `policy "x" is not a policy`, `api-loss "y" is not supported`,
				`ranges line 1 "198.18.0.0/33": "198.18.0.0/33" is not a CIDR`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := config.Parse(tc.data)
			if tc.want == nil {
				assert.Assert(t, len(tc.err) > 0, "a test case needs want or err")
				assert.Assert(t, err != nil, "no error; got %+v", got)
				for _, e := range tc.err {
					assert.ErrorContains(t, err, e)
				}
				assert.Equal(t, len(got.Ranges), 0, "a failed Parse returns no ranges")
				return
			}
			assert.NilError(t, err)
			want := config.Default()
			tc.want(&want)
			assertConfig(t, got, want)
		})
	}
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	assert.NilError(t, err)
	return sel
}

func TestParseSelectorMatches(t *testing.T) {
	c, err := config.Parse(map[string]string{"node-selector": "zone=a,!no-eip"})
	assert.NilError(t, err)
	assert.Assert(t, c.NodeSelector.Matches(labels.Set{"zone": "a"}))
	assert.Assert(t, !c.NodeSelector.Matches(labels.Set{"zone": "a", "no-eip": ""}))
	assert.Assert(t, !c.NodeSelector.Matches(labels.Set{"zone": "b"}))
}

func TestParseErrorKeepsWarnings(t *testing.T) {
	got, err := config.Parse(map[string]string{"polciy": "spread", "policy": "spraed"})
	assert.ErrorContains(t, err, `policy "spraed" is not a policy`)
	assert.DeepEqual(t, got.Warnings, []string{`unknown key "polciy" ignored (did you mean "policy"?)`})
}

func TestParseErrorOneLinePerProblem(t *testing.T) {
	_, err := config.Parse(map[string]string{
		"iface":          "a/b",
		"lease-duration": "0",
		"ranges":         "198.18.0.0/24\n198.18.0.0/25\nnonsense",
	})
	assert.Assert(t, err != nil)
	lines := strings.Split(err.Error(), "\n")
	assert.Equal(t, len(lines), 4, "%s", err)
}

func TestSlowFactor(t *testing.T) {
	c := config.Default()
	for _, tc := range []struct{ nodes, want int }{{3, 10}, {20, 10}, {21, 11}, {25, 13}, {50, 25}, {100, 50}} {
		assert.Equal(t, c.SlowFactor(tc.nodes), tc.want, "%d nodes", tc.nodes)
	}
	c.HeartbeatWrites = 10
	assert.Equal(t, c.SlowFactor(50), 10)
	assert.Equal(t, c.SlowFactor(100), 20)
}

func TestKeys(t *testing.T) {
	// Every key Parse reads must be listed, or setting it would also warn.
	data := map[string]string{}
	for _, k := range config.Keys() {
		data[k] = " "
	}
	c, err := config.Parse(data)
	assert.NilError(t, err)
	assert.Equal(t, len(c.Warnings), 0, fmt.Sprint(c.Warnings))
	assert.Equal(t, len(config.Keys()), 22)
}

func TestReferenceDefaultsAreTheParsers(t *testing.T) {
	// Each default of the reference, written into the ConfigMap, gives
	// the configuration of an empty one: the table says what Parse does.
	for _, k := range config.Reference() {
		if k.Default == "" {
			continue
		}
		c, err := config.Parse(map[string]string{k.Name: k.Default})
		assert.NilError(t, err, k.Name)
		assert.Check(t, c.Equal(config.Default()), "%s: %q is not the default", k.Name, k.Default)
	}
	// And a value other than the default is seen as one, so the check
	// above can fail.
	c, err := config.Parse(map[string]string{"lease-duration": "3s"})
	assert.NilError(t, err)
	assert.Check(t, !c.Equal(config.Default()))
}

// The caps of addresses read as counts, "off" as none, and default to 64
// addresses a Service and none a namespace.
func TestParseCaps(t *testing.T) {
	c, err := config.Parse(nil)
	assert.NilError(t, err)
	assert.Equal(t, c.Caps, config.Caps{PerService: 64})
	c, err = config.Parse(map[string]string{"max-ips-per-service": "off", "max-ips-per-namespace": " 500"})
	assert.NilError(t, err)
	assert.Equal(t, c.Caps, config.Caps{PerNamespace: 500})
	c, err = config.Parse(map[string]string{"max-ips-per-service": "0000008"})
	assert.NilError(t, err)
	assert.Equal(t, c.Caps, config.Caps{PerService: 8})
}
