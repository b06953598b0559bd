package agent

import (
	"context"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/endpoints"
)

// setTrafficPolicy sets Service name's externalTrafficPolicy, as the
// informer would tell the loop.
func (w *world) setTrafficPolicy(name string, p corev1.ServiceExternalTrafficPolicy) {
	svc := w.svcObj(name)
	svc.Spec.ExternalTrafficPolicy = p
	svc.ResourceVersion = w.nextRV()
	w.putService(svc)
	w.s.sched.dirtySvc = true
}

// untilGraceEnds ticks until the next tick is the first a grace after now.
func (w *world) untilGraceEnds() {
	end := w.clk.Now().Add(endpoints.WatchGrace)
	for w.clk.Now().Add(w.s.desired.cfg.RenewInterval).Before(end) {
		w.tick()
	}
}

// The loop watches every EndpointSlice only while a Local Service has an
// IP: not for Cluster Services; from the first Local IP on; still for
// WatchGrace after the last one went, so that one back within it costs no
// second watch; then no more.
func TestLoopWatchesEndpointSlicesOnlyForLocalIPs(t *testing.T) {
	w := loneNodeWithIP(t)
	watched := func(running bool, started int) {
		t.Helper()
		r, n := w.slicesWatched()
		assert.Equal(t, r, running, "watch running")
		assert.Equal(t, n, started, "watches started")
	}
	watched(false, 0)

	w.addLocalService("local", testIP(1))
	w.endpointsOf("local", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	watched(true, 1)
	w.tick()
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-2 holder=node-a", "bind 198.18.100.2"})

	// Within the grace, switched to Cluster and back: the same watch.
	w.setTrafficPolicy("local", corev1.ServiceExternalTrafficPolicyCluster)
	w.pass()
	w.untilGraceEnds()
	watched(true, 1)
	w.setTrafficPolicy("local", corev1.ServiceExternalTrafficPolicyLocal)
	w.pass()
	w.tick()
	watched(true, 1)

	w.setTrafficPolicy("local", corev1.ServiceExternalTrafficPolicyCluster)
	w.pass()
	w.untilGraceEnds()
	watched(true, 1)
	w.tick()
	w.tick()
	watched(false, 1)
	assert.DeepEqual(t, w.take(), []string(nil)) // both IPs stay bound, as Cluster IPs

	w.setTrafficPolicy("local", corev1.ServiceExternalTrafficPolicyLocal)
	w.pass()
	watched(true, 2)
	assert.DeepEqual(t, w.take(), []string(nil))
}

// Until the watch of EndpointSlices has synced, its empty cache says
// nothing: a Cluster IP this node holds, whose Service becomes Local with
// its endpoint on node-b, stays bound here, and a new Local IP whose
// endpoint is here is taken by no node; one this node holds unbound (as
// one it just auto-assigned) is released, not bound where no endpoint may
// be. Once synced, the first is handed to node-b and the second bound
// here.
func TestLoopLocalIPsWaitForTheWatchToSync(t *testing.T) {
	w := loneNodeWithIP(t)
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.tick("node-b")
	w.take()
	w.events()
	w.slicesUnsynced = true

	w.setTrafficPolicy("web", corev1.ServiceExternalTrafficPolicyLocal)
	w.addLocalService("new", testIP(1))
	w.addLocalService("assigned", testIP(2))
	w.lock(testIP(2), "node-a")
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-b": endpoints.Ready})
	w.endpointsOf("new", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-3 holder="})
	for _, e := range w.events() {
		assert.Assert(t, !strings.Contains(e, "Endpoints"), "an Event before the watch synced: %s", e)
	}

	w.slicesUnsynced = false
	w.s.sched.dirtyEps = true // the watch's sync kicks the loop
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-b", "create eip-198-18-100-2 holder=node-a", "bind 198.18.100.2"})
}

// At a start with a Local Service, the loop starts the watch of every
// EndpointSlice before its first pass; with none, it does not.
func TestLoopWarmsTheSliceWatchAtAStartWithALocalService(t *testing.T) {
	w := loneNodeWithIP(t)
	w.s.serving.warm(context.Background(), w.a.allServices(), w.clk.Now())
	running, n := w.slicesWatched()
	assert.Assert(t, !running && n == 0)

	w = newWorld(t, "node-a", defaultTestConfig())
	w.addLocalService("web", testIP(0))
	w.s.serving.warm(context.Background(), w.a.allServices(), w.clk.Now())
	running, n = w.slicesWatched()
	assert.Assert(t, running && n == 1)
	w.pass()
	_, n = w.slicesWatched()
	assert.Equal(t, n, 1)
}
