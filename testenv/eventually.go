package testenv

import (
	"testing"
	"time"
)

// pollInterval is how often Eventually re-checks its condition.
const pollInterval = 20 * time.Millisecond

// Eventually checks cond until it holds, failing the test with cond's last
// message if it does not hold within timeout. cond's message says what was
// seen, for that failure.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ok, msg := cond()
		if ok {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("not within %s: %s", timeout, msg)
		case <-tick.C:
		}
	}
}
