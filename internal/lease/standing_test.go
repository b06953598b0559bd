package lease_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

func TestDecideFence(t *testing.T) {
	sent := at(0)
	for _, c := range []struct {
		name   string
		sent   time.Time
		now    time.Time
		apiOK  bool
		action lease.Action
		at     time.Time
	}{
		{name: "never renewed", now: at(time.Minute)},
		{name: "within fence-after", sent: sent, now: at(time.Second), at: at(3 * time.Second)},
		{name: "past it, renewing again", sent: sent, now: at(4 * time.Second), apiOK: true},
		{name: "past it", sent: sent, now: at(3 * time.Second), action: lease.Unbind},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := lease.DecideFence(c.sent, c.now, 3*time.Second, c.apiOK)
			assert.Equal(t, d.Action, c.action)
			assert.Equal(t, d.At, c.at)
		})
	}
}

func TestDecideClaim(t *testing.T) {
	for _, c := range []struct {
		name                   string
		claim                  lease.Claim
		apiOK, judgedDeadMaybe bool
		action                 lease.Action
	}{
		{name: "API reachable: the lock decides", claim: lease.Claim{MAC: "m"}, apiOK: true},
		{name: "announcement while cut off", claim: lease.Claim{MAC: "m"}, action: lease.Unbind},
		{name: "stranger's probe while cut off", claim: lease.Claim{MAC: "m", Probe: true}, judgedDeadMaybe: true},
		{name: "peer's probe, not judged dead yet", claim: lease.Claim{MAC: "m", Probe: true, Peer: true}},
		{name: "peer's probe once it may be", claim: lease.Claim{MAC: "m", Probe: true, Peer: true}, judgedDeadMaybe: true, action: lease.Unbind},
		{name: "peer's probe, API reachable", claim: lease.Claim{MAC: "m", Probe: true, Peer: true}, apiOK: true, judgedDeadMaybe: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, lease.DecideClaim(c.claim, c.apiOK, c.judgedDeadMaybe).Action, c.action)
		})
	}
}
