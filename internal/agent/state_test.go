package agent

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

// A peer's renewal changes no verdict, so it needs no reconcile pass; a
// change of its status, a new node and an expiry do.
func TestVerdictsIgnoreRenewals(t *testing.T) {
	const renew, duration = 500 * time.Millisecond, 2 * time.Second
	t0 := time.Unix(1_000_000, 0)
	s := &state{live: lease.NewLiveness("node-a", renew, 2*renew)}
	version := 0
	renewAt := func(node string, at time.Time, eligible bool) {
		version++
		s.live.Observe(lease.Heartbeat{Node: node, Duration: duration, RenewTime: at, Eligible: eligible, Held: 3, Version: strconv.Itoa(version)}, at)
	}
	renewAt("node-a", t0, true)
	renewAt("node-b", t0, true)

	now := t0.Add(renew)
	before := s.verdicts(now)
	renewAt("node-a", now, true)
	renewAt("node-b", now, true)
	assert.Check(t, maps.Equal(before, s.verdicts(now)), "a renewal changed a verdict: %v → %v", before, s.verdicts(now))

	now = now.Add(renew)
	before = s.verdicts(now)
	renewAt("node-b", now, false)
	assert.Check(t, !maps.Equal(before, s.verdicts(now)), "node-b becoming ineligible changed no verdict")

	before = s.verdicts(now)
	renewAt("node-c", now, true)
	assert.Check(t, !maps.Equal(before, s.verdicts(now)), "a new node changed no verdict")

	// node-b stops renewing while node-a's renewals keep the stream fresh:
	// a lease duration later it is dead.
	before = s.verdicts(now)
	for range int(duration / renew) {
		now = now.Add(renew)
		renewAt("node-a", now, true)
		renewAt("node-c", now, true)
	}
	after := s.verdicts(now)
	assert.Check(t, before["node-b"].alive && !after["node-b"].alive, "node-b: %v → %v", before["node-b"], after["node-b"])
	assert.Check(t, after["node-c"].alive && after["node-c"].renewing)
}

// clone is a copy of the queue that changes to q do not reach.
func (q waitQueue) clone() waitQueue {
	q.at, q.order = maps.Clone(q.at), slices.Clone(q.order)
	return q
}
