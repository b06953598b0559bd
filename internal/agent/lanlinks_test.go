package agent

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/netif"
)

// A pod starting here brings up a veth of its own, down first, then with
// carrier: that says nothing of the LAN, so the IP of its Local Service,
// handed here as the pod becomes ready, is bound at once, not after a
// renewal's round trip ("re-reading locks before binding"), which took
// 0.5 to 0.8 s on the real-node bed. The LAN interface's own return still
// waits for that round trip.
func TestLoopAPodsLinkDoesNotDelayBinds(t *testing.T) {
	w := localWorld(t)
	w.lock(testIP(0), "node-b")
	w.tick("node-b")
	w.take()

	w.s.linkEvent(netif.LinkEvent{Iface: "veth1a2b3c", Up: false})
	w.s.linkEvent(netif.LinkEvent{Iface: "veth1a2b3c", Up: true})
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready, "node-b": endpoints.Leaving})
	w.lock(testIP(0), "node-a") // node-b's hand-off
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})

	w.s.linkEvent(netif.LinkEvent{Iface: testIface, Up: false})
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1"})
	w.s.linkEvent(netif.LinkEvent{Iface: testIface, Up: true})
	w.pass()
	assert.DeepEqual(t, w.take(), []string(nil)) // the LAN link's return waits for a renewal
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
}
