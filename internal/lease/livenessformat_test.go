package lease

import (
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// isLivenessFormatAt reads exactly what livenessFormatAt writes.
func TestIsLivenessFormatAt(t *testing.T) {
	ts := []time.Time{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), time.UnixMicro(0), time.UnixMicro(-5), time.Date(2026, 3, 1, 12, 0, 0, 1500000, time.UTC)}
	for _, a := range ts {
		for _, b := range ts {
			assert.Equal(t, isLivenessFormatAt(livenessFormatAt(a), b), a.Equal(b), "%s %s", a, b)
		}
		w := livenessFormatAt(a)
		_, us, _ := strings.Cut(w, "@")
		for _, bad := range []string{"", LivenessFormat, LivenessFormat + "@", LivenessFormat + "@+" + us, LivenessFormat + "@0" + us, "1@" + us, w + "x"} {
			assert.Assert(t, !isLivenessFormatAt(bad, a), "%q", bad)
		}
	}
}
