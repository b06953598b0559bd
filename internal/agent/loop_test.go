package agent

import (
	"testing"

	"gotest.tools/v3/assert"
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
