package agent

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/policy"
)

// A lone node takes a new Service's IP: one create naming itself, then the
// bind, and nothing more on the following ticks.
func TestLoopLoneNodeTakesAnIP(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addService("web", testIP(0))
	w.pass()
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
	for range 10 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string(nil))
}

// A peer that stops renewing loses its IP to the survivor exactly once,
// after its lease duration: one update naming the survivor, one bind.
func TestLoopTakeoverFromDeadPeer(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.lock(testIP(0), "node-b")
	w.addService("web", testIP(0))
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	for range 3 {
		w.tick() // node-b silent for 1.5 s: still alive
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
}

// A node that may hold no IP renews its heartbeat every ten renew
// intervals with a ten times longer duration, and at once, at the usual
// pace, when it becomes eligible.
func TestLoopIneligibleNodeRenewsSlowly(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	n := w.nodeObj("node-a")
	n.Labels = map[string]string{policy.ExcludeLabel: ""}
	w.must(w.nodes.Update(n))
	w.s.dirtyNodes = true
	w.pass()
	for range 24 {
		w.tick()
	}
	assert.DeepEqual(t, w.renewals, []string{
		"500ms create eligible=false duration=20s",
		"5.5s update eligible=false duration=20s",
		"10.5s update eligible=false duration=20s",
	})
	w.renewals = nil
	n = w.nodeObj("node-a")
	n.Labels = nil
	w.must(w.nodes.Update(n))
	w.s.dirtyNodes = true
	w.pass()
	for range 3 {
		w.tick()
	}
	assert.DeepEqual(t, w.renewals, []string{
		"12.5s update eligible=true duration=2s",
		"13s update eligible=true duration=2s",
		"13.5s update eligible=true duration=2s",
	})
}
