package agent

import (
	"testing"

	"gotest.tools/v3/assert"
)

// A full pass works out each lock as this node sees it once, whoever reads
// it: the plan, the allocation and the decisions. Managed IPs, some held
// by a peer, and two locks of IPs no Service names.
func TestFullPassResolvesEachLockOnce(t *testing.T) {
	for _, policy := range []string{"sticky", "spread"} {
		t.Run(policy, func(t *testing.T) {
			cfg := defaultTestConfig()
			cfg["policy"] = policy
			w := newWorld(t, "node-a", cfg)
			w.addNode("node-b")
			w.heartbeat("node-b", true)
			const managed, orphans = 10, 2
			for i := range managed {
				w.addService("svc-"+testIP(i).String(), testIP(i))
			}
			for i := range 3 {
				w.lock(testIP(i), "node-b")
			}
			for i := range orphans {
				w.lock(testIP(managed+i), "node-b")
			}
			w.pass()
			before := w.s.book.resolutions
			w.s.reconcile()
			assert.Equal(t, w.s.book.resolutions-before, managed+orphans)
		})
	}
}

// A pass that binds IPs announced as routes works out their locks once
// too: the route's MED counts the lock's moves, read from the lock the
// decision was made on, not looked up again.
func TestFullPassBindingRoutesResolvesEachLockOnce(t *testing.T) {
	cfg := map[string]string{
		"bgp-asn": "64512", "bgp-router-id": "198.18.0.99", "bgp-peers": "198.18.0.3 asn=64500",
		"ranges": "198.18.96.0/19 announce=both iface=" + testIface,
	}
	w := newWorld(t, "node-a", cfg)
	const managed = 4
	for i := range managed {
		w.addService("svc-"+testIP(i).String(), testIP(i))
	}
	w.pass()
	for range 4 {
		w.tick()
	}
	assert.Equal(t, len(w.s.binder.bound), managed)
	// Their locks name this node, and it has not bound them: the next
	// full pass binds them again.
	for ip := range w.s.binder.bound {
		w.s.unbind(ip, "test")
	}
	w.take()
	before := w.s.book.resolutions
	w.s.reconcile()
	assert.Equal(t, len(w.s.binder.bound), managed, "the pass bound %v", w.take())
	assert.Equal(t, w.s.book.resolutions-before, managed)
}
