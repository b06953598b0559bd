package agent

import (
	"errors"
	"slices"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/wire"
)

// The successor of an IP a live peer holds checks it on the wire by
// asking for it (Announcer.Ask), never by probing: a holder cut off from
// the API server reads a peer's probe as a takeover and gives the IP up.
// Unanswered questions become a verdict; questions that could not be sent
// (the interface has no address to ask from) are no evidence, and however
// long that lasts no verdict comes.
func TestLoopWireChecksAskAndNeverProbe(t *testing.T) {
	for _, askErr := range []error{nil, errors.New("no address to ask from")} {
		w := newWorld(t, "node-a", defaultTestConfig())
		w.s.wire = newWireChecks("node-a", wire.DefaultPace)
		w.askErr = askErr
		w.addNode("node-b")
		w.heartbeat("node-b", true)
		ip := testIP(0)
		w.addService("web", ip)
		w.lockNaming(ip, "node-b", "node-a")
		w.pass()
		var calls []string
		for range 40 { // 40 renew intervals: several checks' worth
			w.tick("node-b")
			calls = append(calls, w.take()...)
		}
		assert.Assert(t, slices.Contains(calls, "ask "+ip.String()), "%v", calls)
		assert.Assert(t, !slices.Contains(calls, "probe "+ip.String()), "%v", calls)
		e, _ := w.s.wire.sched.Verdict(ip)
		if askErr == nil {
			assert.Equal(t, e.Verdict, wire.NoAnswer)
		} else {
			assert.Equal(t, e.Verdict, wire.Unchecked, "a verdict from questions never sent: %v", e)
		}
	}
}
