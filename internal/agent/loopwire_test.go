package agent

import (
	"errors"
	"slices"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/netif"
	"github.com/eip-project/eip/internal/wire"
)

// The successor of an IP a live peer holds checks it on the wire by
// asking for it (Announcer.Ask), never by probing: a holder cut off from
// the API server reads a peer's probe as a takeover and gives the IP up.
// Unanswered questions become a verdict. Questions that could not be sent
// (the interface has no address to ask from) are no evidence, nor is
// silence while the claim watch reports frames dropped unread: however
// long either lasts, no verdict comes.
func TestLoopWireChecksAskAndNeverProbe(t *testing.T) {
	for name, tc := range map[string]struct {
		askErr  error
		dropped bool
		want    wire.Verdict
	}{
		"unanswered":        {want: wire.NoAnswer},
		"no address to ask": {askErr: errors.New("no address to ask from"), want: wire.Unchecked},
		"frames dropped":    {dropped: true, want: wire.Unchecked},
	} {
		w := newWorld(t, "node-a", defaultTestConfig())
		w.s.wire = newWireChecks("node-a", wire.DefaultPace, w.a.opt.Announcer, w.a.heartbeats, w.a.log, w.a.opt.Metrics, w.s.events)
		w.askErr = tc.askErr
		w.addNode("node-b")
		w.heartbeat("node-b", true)
		ip := testIP(0)
		w.addService("web", ip)
		w.lockNaming(ip, "node-b", "node-a")
		w.pass()
		var calls []string
		for range 40 { // 40 renew intervals: several checks' worth
			w.tick("node-b")
			if tc.dropped {
				assert.Assert(t, !w.s.claim(netif.Claim{Iface: testIface, Dropped: 1}), name)
			}
			calls = append(calls, w.take()...)
		}
		assert.Assert(t, slices.Contains(calls, "ask "+ip.String()), "%s: %v", name, calls)
		assert.Assert(t, !slices.Contains(calls, "probe "+ip.String()), "%s: %v", name, calls)
		e, _ := w.s.wire.sched.Verdict(ip)
		assert.Equal(t, e.Verdict, tc.want, name)
	}
}
