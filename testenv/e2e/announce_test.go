package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/testenv"
)

// With announce-interval set, the holder announces a held IP again once
// per interval, long after the repeats that follow its bind: a client on
// the LAN sees a gratuitous ARP request and reply from the holder's MAC,
// and no other, every 10 s.
func TestAnnounceIntervalRepeats(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["announce-interval"] = "10s"
	e := newEnv(t, cfg)
	ip := testenv.ServiceIP(201)
	e.service("reannounced", ip)
	holder := e.served(ip)
	l, err := e.c.ListenAnnouncements(testenv.Client, ip)
	e.must(err)
	heard, err := l.Record(35 * time.Second)
	e.must(err)

	// Frames less than half a second apart are one announcement.
	var bursts [][]testenv.Heard
	for _, h := range heard {
		assert.Assert(t, bytes.Equal(h.MAC, e.mac(holder)), "%s announced by %s, not its holder %s", ip, h.MAC, holder)
		if n := len(bursts); n > 0 && h.At.Sub(bursts[n-1][len(bursts[n-1])-1].At) < 500*time.Millisecond {
			bursts[n-1] = append(bursts[n-1], h)
			continue
		}
		bursts = append(bursts, []testenv.Heard{h})
	}
	var shown []string
	for _, b := range bursts {
		shown = append(shown, fmt.Sprintf("%s×%d", b[0].At.Format("15:04:05.000"), len(b)))
	}
	t.Logf("announcements of %s over 35 s: %v", ip, shown)
	// The repeats of the bind end 4 s after it; the last three
	// announcements are the interval's.
	assert.Assert(t, len(bursts) >= 3, "%v", shown)
	last := bursts[len(bursts)-3:]
	for i, b := range last {
		assert.Equal(t, len(b), 2, "a gratuitous ARP request and reply: %v", shown)
		if i > 0 {
			gap := b[0].At.Sub(last[i-1][0].At)
			assert.Assert(t, gap >= 9*time.Second && gap <= 11500*time.Millisecond, "announced again after %s: %v", gap, shown)
		}
	}
	assert.DeepEqual(t, e.boundOn(ip), []string{holder})
}
