package endpoints

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// The watch starts with the first Local IP, outlives the last one by
// WatchGrace, and a Local IP back within the grace keeps it running.
func TestDemand(t *testing.T) {
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at     time.Duration
		needed bool
		want   Change
	}{
		{0, false, Keep}, // Cluster Services only: never started
		{time.Second, false, Keep},
		{2 * time.Second, true, Start},
		{3 * time.Second, true, Keep},
		{4 * time.Second, false, Keep}, // the grace begins
		{4*time.Second + WatchGrace - 1, false, Keep},
		{5 * time.Second, true, Keep}, // back within the grace: no relist
		{6 * time.Second, false, Keep},
		{6*time.Second + WatchGrace - 1, false, Keep},
		{6*time.Second + WatchGrace, false, Stop},
		{7*time.Second + WatchGrace, false, Keep},
		{8*time.Second + WatchGrace, true, Start},
		{9*time.Second + WatchGrace, true, Keep},
	}
	var d Demand
	for i, s := range steps {
		assert.Equal(t, d.Update(s.needed, t0.Add(s.at)), s.want, "step %d", i)
	}
}
