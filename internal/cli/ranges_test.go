package cli

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/golden"
	"k8s.io/apimachinery/pkg/runtime"
)

// rangesFixture is fixture() with ranges of every kind: a named auto-assign
// range, one kept for two namespaces, and a span announced over BGP that a
// Service without lock names an address of.
func rangesFixture() []runtime.Object {
	objs := append(fixture(), externalIPs("shop", "routed", "198.18.101.3"))
	objs[0] = withData(objs[0], map[string]string{
		"netmask": "24",
		"ranges": "198.18.100.0/24 name=lan auto-assign\n" +
			"2001:db8::100:0/112 iface=eth1 namespaces=shop,default\n" +
			"198.18.101.0-198.18.101.9 name=routed announce=bgp\n",
		"bgp-peers": "198.18.0.1 asn=64512",
		"bgp-asn":   "64513",
	})
	return objs
}

// The table counts each range's addresses as the IP table shows them:
// lan allocates .1 to .6 (.1, .2 bound, .5 moving; .3 and .4 unbound, .6 in
// conflict; .0, named too, is refused) and reserves its network and
// broadcast addresses; the IPv6 range allocates one bound IP, routed one
// unbound.
func TestStatusRangesGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"status-ranges.golden", []string{"status", "--ranges"}},
		{"status-ranges.golden", []string{"status", "--ranges", "-o", "wide"}},
		{"status-ranges-json.golden", []string{"status", "--ranges", "-o", "json"}},
		{"status-ranges-yaml.golden", []string{"status", "--ranges", "-o", "yaml"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			h := newHarness(t, rangesFixture()...)
			out, err := h.run(context.Background(), tc.args...)
			assert.NilError(t, err)
			golden.Assert(t, out, tc.golden)
		})
	}
}

// Without a valid ConfigMap the plugin cannot know the ranges the daemons
// use: it says so rather than print counts.
func TestStatusRangesConfigProblems(t *testing.T) {
	objs := fixture()
	h := newHarness(t, objs[1:]...)
	out, err := h.run(context.Background(), "status", "--ranges")
	assert.NilError(t, err)
	golden.Assert(t, out, "status-ranges-no-configmap.golden")

	objs[0] = withData(objs[0], map[string]string{"ranges": "198.18.100.0/24 name=lan\n198.18.100.7 name=lan"})
	h = newHarness(t, objs...)
	out, err = h.run(context.Background(), "status", "--ranges")
	assert.NilError(t, err)
	golden.Assert(t, out, "status-ranges-invalid-configmap.golden")
}

// Every field of the report is present, and each range's counts add up.
func TestStatusRangesJSONSchema(t *testing.T) {
	h := newHarness(t, rangesFixture()...)
	out, err := h.run(context.Background(), "status", "--ranges", "-o", "json")
	assert.NilError(t, err)
	var doc map[string]any
	assert.NilError(t, json.Unmarshal([]byte(out), &doc))
	keys := func(m any) []string { return slices.Sorted(maps.Keys(m.(map[string]any))) }
	assert.DeepEqual(t, keys(doc), []string{"config", "namespace", "observedAt", "ranges", "schemaVersion"})
	var rep RangeReport
	assert.NilError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, len(rep.Ranges), 3)
	for i, r := range doc["ranges"].([]any) {
		assert.DeepEqual(t, keys(r), []string{"addresses", "allocated", "announce", "autoAssign", "bound", "capacity", "family", "free", "name", "namespaces", "reserved"})
		u := rep.Ranges[i]
		assert.Equal(t, u.Capacity, u.Allocated+u.Free+u.Reserved, u.Addresses)
		assert.Assert(t, u.Bound <= u.Allocated, u.Addresses)
	}
}

func TestStatusRangesArguments(t *testing.T) {
	h := newHarness(t, fixture()...)
	_, err := h.run(context.Background(), "status", "--ranges", "198.18.100.1")
	assert.Error(t, err, "--ranges takes no IP arguments: it reports every range")
}
