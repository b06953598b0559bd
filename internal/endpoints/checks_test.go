package endpoints

import (
	"fmt"
	"slices"
	"testing"

	"gotest.tools/v3/assert"
)

// started records the checks Judge starts; ok says whether they can be.
type started struct {
	ok   bool
	keys []Key
	gens []uint64
}

func (s *started) start(k Key, gen uint64) bool {
	s.keys = append(s.keys, k)
	s.gens = append(s.gens, gen)
	return s.ok
}

func TestChecksPendUntilKubeProxyDelivers(t *testing.T) {
	var c Checks
	st := &started{ok: true}
	got := c.Judge("ns/web", map[string]Readiness{"a": Ready, "b": Leaving, "c": None}, true, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Pending, "b": Leaving, "c": None})
	assert.DeepEqual(t, st.keys, []Key{{"ns/web", "a"}})
	c.Sweep()

	// Asked again before the verdict: no second check.
	got = c.Judge("ns/web", map[string]Readiness{"a": Ready}, true, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Pending})
	assert.Equal(t, len(st.keys), 1)
	c.Sweep()

	assert.Assert(t, c.Done(Result{Key{"ns/web", "a"}, st.gens[0], Delivers}))
	assert.Assert(t, !c.Done(Result{Key{"ns/web", "a"}, st.gens[0], Delivers}), "the same verdict twice")
	got = c.Judge("ns/web", map[string]Readiness{"a": Ready}, true, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Ready})
	c.Sweep()
}

func TestChecksUnknownCountsAsReady(t *testing.T) {
	var c Checks
	st := &started{ok: false}
	got := c.Judge("ns/web", map[string]Readiness{"a": Ready}, true, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Ready}) // a check that cannot be made
	c.Sweep()

	st.ok = true
	got = c.Judge("ns/other", map[string]Readiness{"a": Ready}, true, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Pending})
	assert.Assert(t, c.Done(Result{Key{"ns/other", "a"}, st.gens[1], Unknown}))
	got = c.Judge("ns/other", map[string]Readiness{"a": Ready}, true, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Ready}) // kube-proxy gave no verdict
}

// A node no longer ready is forgotten: its next endpoint is checked anew,
// and the verdict of the old check does not count for it.
func TestChecksForgetNodesNoLongerReady(t *testing.T) {
	var c Checks
	st := &started{ok: true}
	c.Judge("ns/web", map[string]Readiness{"a": Ready}, true, st.start)
	c.Sweep()
	c.Judge("ns/web", map[string]Readiness{"a": Leaving}, true, st.start)
	c.Sweep()
	assert.Assert(t, !c.Done(Result{Key{"ns/web", "a"}, st.gens[0], Delivers}), "a forgotten node")

	got := c.Judge("ns/web", map[string]Readiness{"a": Ready}, true, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Pending})
	assert.Equal(t, len(st.keys), 2)
	assert.Assert(t, !c.Done(Result{Key{"ns/web", "a"}, st.gens[0], Delivers}), "the verdict of the old check")
	assert.Assert(t, c.Done(Result{Key{"ns/web", "a"}, st.gens[1], Delivers}))
}

// A wait ends on the first node that delivers to every Service, else on
// one that could not tell, else on none (the endpoints changed).
func TestChecksOutcome(t *testing.T) {
	var c Checks
	st := &started{ok: true}
	c.Judge("ns/web", map[string]Readiness{"a": Ready, "b": Ready, "c": Ready}, true, st.start)
	c.Judge("ns/api", map[string]Readiness{"a": Ready, "b": Ready}, true, st.start)
	gen := func(k Key) uint64 { return st.gens[slices.Index(st.keys, k)] }
	node, v := c.Outcome([]string{"ns/web", "ns/api"}, []string{"a", "b", "c"})
	assert.Equal(t, node+" "+fmt.Sprint(v), " 0", "all still checking")

	c.Done(Result{Key{"ns/web", "c"}, gen(Key{"ns/web", "c"}), Unknown})
	node, v = c.Outcome([]string{"ns/web", "ns/api"}, []string{"a", "b", "c"})
	assert.Equal(t, node, "c")
	assert.Equal(t, v, Unknown)

	c.Done(Result{Key{"ns/web", "b"}, gen(Key{"ns/web", "b"}), Delivers})
	node, v = c.Outcome([]string{"ns/web", "ns/api"}, []string{"a", "b", "c"})
	assert.Equal(t, node+" "+fmt.Sprint(v), "c 2", "b delivers to one of the two only")
	c.Done(Result{Key{"ns/api", "b"}, gen(Key{"ns/api", "b"}), Delivers})
	node, v = c.Outcome([]string{"ns/web", "ns/api"}, []string{"a", "b", "c"})
	assert.Equal(t, node, "b")
	assert.Equal(t, v, Delivers)
}

// A node that does not ask (neither holder nor successor) begins no check
// and takes a ready node as ready; a check it began before still counts.
func TestChecksOnlyWhenAsked(t *testing.T) {
	var c Checks
	st := &started{ok: true}
	got := c.Judge("ns/web", map[string]Readiness{"a": Ready, "b": Ready}, false, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Ready, "b": Ready})
	assert.Equal(t, len(st.keys), 0)
	c.Judge("ns/web", map[string]Readiness{"a": Ready}, true, st.start)
	assert.DeepEqual(t, st.keys, []Key{{"ns/web", "a"}})
	c.Sweep()
	got = c.Judge("ns/web", map[string]Readiness{"a": Ready, "b": Ready}, false, st.start)
	assert.DeepEqual(t, got, map[string]Readiness{"a": Pending, "b": Ready})
	assert.Equal(t, len(st.keys), 1)
}
