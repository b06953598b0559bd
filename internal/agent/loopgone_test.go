package agent

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/lease"
)

// outOfService taints Node name node.kubernetes.io/out-of-service, as an
// operator does after shutting a node down without draining it.
func (w *world) outOfService(name string) {
	n := w.nodeObj(name)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	w.must(w.nodes.Update(n))
	w.s.sched.dirtyNodes = true
}

// node-b holds an IP whose lock names node-a its successor, and goes out
// of service (tainted, or its Node deleted) while its heartbeat keeps
// renewing: node-a takes the IP over in the next pass, probing first as a
// successor does, not a lease duration later.
func TestLoopGoneHolderLosesItsIPsAtOnce(t *testing.T) {
	for _, how := range []string{"tainted", "deleted"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t, "node-a", defaultTestConfig())
			w.probeWait(60 * time.Millisecond)
			w.addNode("node-b")
			w.heartbeat("node-b", true)
			ip := testIP(0)
			w.lockNaming(ip, "node-b", "node-a")
			w.addService("web", ip)
			w.pass()
			for range 4 {
				w.tick("node-b")
			}
			assert.DeepEqual(t, w.take(), []string(nil))

			if how == "tainted" {
				w.outOfService("node-b")
			} else {
				w.must(w.nodes.Delete(w.nodeObj("node-b")))
				w.s.sched.dirtyNodes = true
			}
			w.heartbeat("node-b", true)
			gone := w.clk.Now()
			w.pass()
			var calls []string
			for range 4 { // 120 ms: two probes, then the probe wait
				calls = append(calls, w.take()...)
				w.step(30 * time.Millisecond)
				w.pass()
			}
			calls = append(calls, w.take()...)
			assert.Assert(t, w.s.live.Alive("node-b", w.clk.Now()), "its heartbeat still renews")
			assert.Assert(t, w.clk.Since(gone) < w.s.desired.cfg.LeaseDuration)
			assert.DeepEqual(t, calls, []string{"probe 198.18.100.1", "probe 198.18.100.1", "bind 198.18.100.1", "update eip-198-18-100-1 holder=node-a"})
		})
	}
}

// This node goes out of service while it holds an IP: it unbinds it at
// once and writes nothing (its successor takes the IP over as it sees
// the node gone), and binds nothing again while it is gone, though the
// lock still names it. Cordoned instead, it hands the IP off by the
// graceful path: unbind, then the lock naming its peer.
func TestLoopGoneNodeUnbindsWithoutWriting(t *testing.T) {
	for _, how := range []string{"tainted", "cordoned"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t, "node-a", defaultTestConfig())
			w.addNode("node-b")
			w.heartbeat("node-b", true)
			ip := testIP(0)
			w.lockNaming(ip, "node-a", "node-b")
			w.addService("web", ip)
			w.pass()
			for range 4 {
				w.tick("node-b")
			}
			assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})

			if how == "tainted" {
				w.outOfService("node-a")
			} else {
				n := w.nodeObj("node-a")
				n.Spec.Unschedulable = true
				w.must(w.nodes.Update(n))
				w.s.sched.dirtyNodes = true
			}
			w.pass()
			w.settle()
			var calls []string
			for range 8 {
				w.tick("node-b")
				calls = append(calls, w.take()...)
			}
			if how == "tainted" {
				assert.DeepEqual(t, calls, []string{"unbind 198.18.100.1"})
				obj, ok, _ := w.leases.GetByKey(testNS + "/" + leaseName(ip))
				assert.Assert(t, ok)
				assert.Equal(t, obj.(*lease.Kept).Holder, "node-a", "no lock write")
				return
			}
			assert.DeepEqual(t, calls, []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-b"})
		})
	}
}

// Stopped while out of service (the taint's NoExecute evicts eipd), a node
// hands nothing off: its successors are taking its IPs over, binding
// before they write, and a hand-off's target binds without a probe.
func TestShutdownOutOfServiceHandsNothingOff(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	ip := testIP(0)
	w.lockNaming(ip, "node-a", "node-b")
	w.addService("web", ip)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	w.outOfService("node-a")
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1"})
	assert.DeepEqual(t, shutdownAnswered(t, w), []string(nil))
	assert.DeepEqual(t, w.take(), []string(nil))
}
