package metrics

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestRenewalsCheck(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		r    renewals
		now  time.Duration
		err  string // substring; "" means ready
	}{
		{name: "never renewed", r: renewals{}, now: 0, err: "heartbeat not renewed yet"},
		{name: "never renewed, only failures", r: renewals{failing: true}, now: 0, err: "heartbeat not renewed yet"},
		{name: "one renewal, fresh", r: renewals{last: at(0)}, now: 5 * time.Second},
		{name: "one renewal, stale after the floor", r: renewals{last: at(0)}, now: 5*time.Second + ms, err: "heartbeat not renewed for 5.001s (limit 5s)"},
		{name: "default interval, fresh within the floor", r: renewals{prev: at(0), last: at(500 * ms)}, now: 5 * time.Second},
		{name: "default interval, stale", r: renewals{prev: at(0), last: at(500 * ms)}, now: 6 * time.Second, err: "limit 5s"},
		{name: "long interval stretches the limit", r: renewals{prev: at(0), last: at(10 * time.Second)}, now: 40 * time.Second},
		{name: "long interval, stale after three intervals", r: renewals{prev: at(0), last: at(10 * time.Second)}, now: 40*time.Second + ms, err: "limit 30s"},
		{name: "failing", r: renewals{prev: at(0), last: at(500 * ms), failing: true}, now: 700 * ms, err: "heartbeat renewal failing since the last success 200ms ago"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.check(at(tc.now))
			if tc.err == "" {
				assert.NilError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.err)
		})
	}
}

func TestRenewalsTransitions(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := renewals{}.renewed(t0)
	assert.Equal(t, r, renewals{last: t0})
	r = r.failed()
	assert.Assert(t, r.check(t0) != nil, "a failure after the last success makes it unready")
	r = r.renewed(t0.Add(time.Second))
	assert.Equal(t, r, renewals{last: t0.Add(time.Second), prev: t0}, "a success clears the failure")
	assert.NilError(t, r.check(t0.Add(time.Second)))
}
