package lease_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

func TestBGPSessionsRoundTrip(t *testing.T) {
	up := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	in := []lease.BGPSession{{Peer: "198.18.0.3", State: "established", Since: &up}, {Peer: "2001:db8::3", State: "active"}}
	text := lease.FormatBGPSessions(in)
	assert.Equal(t, text, "198.18.0.3=established@2026-12-01T15:00:00Z,2001:db8::3=active")
	assert.DeepEqual(t, lease.ParseBGPSessions(text), in)
	assert.Equal(t, len(lease.ParseBGPSessions("")), 0)
	assert.DeepEqual(t, lease.ParseBGPSessions("garbage,=x,198.18.0.4=idle@notatime"), []lease.BGPSession{{Peer: "198.18.0.4", State: "idle"}})
}
