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
