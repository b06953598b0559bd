package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	t.Setenv("NODE_IP", "")
	for _, tc := range []struct {
		name string
		args []string
		want string // substring of the error; empty for success
	}{
		{name: "minimal", args: []string{"--node-name=n1"}},
		{name: "node name missing", args: nil, want: "flag --node-name: required"},
		{name: "empty namespace", args: []string{"--node-name=n1", "--namespace="}, want: "flag --namespace: must not be empty"},
		{name: "empty config map", args: []string{"--node-name=n1", "--config-map="}, want: "flag --config-map: must not be empty"},
		{name: "negative verbosity", args: []string{"--node-name=n1", "-v=-1"}, want: "flag -v: -1 is negative"},
		{name: "bad qps", args: []string{"--node-name=n1", "--kube-api-qps=0"}, want: "flag --kube-api-qps"},
		{name: "bad burst", args: []string{"--node-name=n1", "--kube-api-burst=-3"}, want: "flag --kube-api-burst"},
		{name: "unknown flag", args: []string{"--node-name=n1", "--nodename=x"}, want: "flag provided but not defined: -nodename"},
		{name: "not a number", args: []string{"--node-name=n1", "-v=x"}, want: `invalid value "x" for flag -v`},
		{name: "bad node address", args: []string{"--node-name=n1", "--node-ip=198.18.0.300"}, want: "flag --node-ip: "},
		{name: "stray argument", args: []string{"--node-name=n1", "extra"}, want: `unexpected arguments ["extra"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args)
			if tc.want == "" {
				assert.NilError(t, err)
				assert.Equal(t, o.node, "n1")
				assert.Equal(t, o.namespace, "eip-system")
				assert.Equal(t, o.configMap, "eip-config")
				return
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// The metrics port binds the node's address (NODE_IP, from the downward
// API) unless --metrics-addr names a host; without one it binds every
// address.
func TestMetricsAddrOnTheNodeAddress(t *testing.T) {
	t.Setenv("NODE_IP", "198.18.0.11")
	for args, want := range map[string]string{
		"":                              "198.18.0.11:9402",
		"--metrics-addr=:9500":          "198.18.0.11:9500",
		"--metrics-addr=127.0.0.1:9402": "127.0.0.1:9402",
		"--metrics-addr=":               "",
		"--node-ip=2001:db8::11":        "[2001:db8::11]:9402",
	} {
		o, err := parseFlags(append([]string{"--node-name=n1"}, strings.Fields(args)...))
		assert.NilError(t, err)
		assert.Equal(t, o.metricsAddr, want, args)
	}
	t.Setenv("NODE_IP", "")
	o, err := parseFlags([]string{"--node-name=n1"})
	assert.NilError(t, err)
	assert.Equal(t, o.metricsAddr, ":9402")
	assert.Assert(t, !o.nodeIP.IsValid())
}

func TestNodeNameFromEnvironment(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	t.Setenv("POD_NAMESPACE", "eip-other")
	o, err := parseFlags(nil)
	assert.NilError(t, err)
	assert.Equal(t, o.node, "from-env")
	assert.Equal(t, o.namespace, "eip-other")
}

func TestAPIServerAddrs(t *testing.T) {
	for _, tc := range []struct {
		host string
		want []netip.Addr
	}{
		{"https://198.18.0.1:6443", []netip.Addr{netip.MustParseAddr("198.18.0.1")}},
		{"https://[2001:db8::1]:6443", []netip.Addr{netip.MustParseAddr("2001:db8::1")}},
		{"198.18.0.2:443", []netip.Addr{netip.MustParseAddr("198.18.0.2")}},
		{"https://[::ffff:198.18.0.3]", []netip.Addr{netip.MustParseAddr("198.18.0.3")}},
		{"https://localhost:6443", nil}, // resolved: loopback, whatever the resolver says
	} {
		got, err := apiServerAddrs(context.Background(), tc.host)
		assert.NilError(t, err, tc.host)
		if tc.want == nil {
			assert.Assert(t, len(got) > 0 && got[0].IsLoopback(), "%s: %v", tc.host, got)
			continue
		}
		assert.DeepEqual(t, got, tc.want, cmpopts.EquateComparable(netip.Addr{}))
	}
}
