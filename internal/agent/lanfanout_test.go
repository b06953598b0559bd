package agent

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

var fanTimings = lanTimings{renew: 500 * time.Millisecond, suspect: time.Second, duration: 2 * time.Second}

func fanPeers(n int, self string) []string {
	var out []string
	for i := range n {
		if p := fmt.Sprintf("node-%02d", i); p != self {
			out = append(out, p)
		}
	}
	return out
}

// With few peers, every one gets every datagram, as before the fan-out.
func TestFanoutFewPeersGetAll(t *testing.T) {
	f := newFanout()
	peers := fanPeers(5, "node-02")
	f.setPeers(peers, t0)
	heard := func(string) time.Time { return t0 }
	for i := range 3 {
		assert.DeepEqual(t, f.tick("node-02", peers, heard, fanTimings, t0.Add(time.Duration(i)*fanTimings.renew)), peers)
	}
}

// With many, a datagram goes to the two peers that follow in name order
// and two more in turn: each peer gets one from node-05 at least every
// 24 renew intervals of a 50-node cluster, and node-05's successors, from
// node-49 round to node-00, every time.
func TestFanoutRingAndTurn(t *testing.T) {
	f := newFanout()
	peers := fanPeers(50, "node-05")
	f.setPeers(peers, t0)
	now := t0
	heard := func(string) time.Time { return now }
	got := map[string]int{}
	const ticks = 24
	for range ticks {
		to := f.tick("node-05", peers, heard, fanTimings, now)
		assert.Equal(t, len(to), ringFanout+turnFanout)
		assert.DeepEqual(t, to[:2], []string{"node-06", "node-07"})
		for _, p := range to {
			got[p]++
		}
		now = now.Add(fanTimings.renew)
	}
	assert.Equal(t, len(got), 49, "every peer in 24 renew intervals")
	assert.Equal(t, got["node-06"], ticks)
	assert.Equal(t, got["node-00"], 1)

	f = newFanout()
	peers = fanPeers(50, "node-49")
	f.setPeers(peers, now)
	assert.DeepEqual(t, f.tick("node-49", peers, heard, fanTimings, now)[:2], []string{"node-00", "node-01"})
}

// A peer whose latest sign grows suspect old is asked directly, at once
// (due says when), then every renew interval while it stays that old,
// until it is a lease duration old: judged dead, it is reached in turn
// only.
func TestFanoutAsksSuspectPeers(t *testing.T) {
	f := newFanout()
	peers := fanPeers(50, "node-05")
	f.setPeers(peers, t0)
	// Everyone is heard all the time but node-30, last heard at t0.
	signs := map[string]time.Time{}
	sign := func(p string) time.Time { return signs[p] }
	at := func(d time.Duration) time.Time {
		now := t0.Add(d)
		for _, p := range peers {
			signs[p] = now
		}
		signs["node-30"] = t0
		return now
	}
	ask, next := f.due(peers, sign, fanTimings, at(300*time.Millisecond))
	assert.DeepEqual(t, ask, []string(nil))
	assert.Equal(t, next, t0.Add(fanTimings.suspect), "node-30 is due a second after its sign")
	ask, _ = f.due(peers, sign, fanTimings, at(fanTimings.suspect))
	assert.DeepEqual(t, ask, []string{"node-30"})
	ask, next = f.due(peers, sign, fanTimings, at(fanTimings.suspect+time.Millisecond))
	assert.DeepEqual(t, ask, []string(nil)) // asked once a renew interval
	assert.Equal(t, next, t0.Add(fanTimings.suspect+fanTimings.renew))
	// The tick's datagram goes to node-30 too.
	to := f.tick("node-05", peers, sign, fanTimings, at(fanTimings.suspect+fanTimings.renew))
	assert.Assert(t, slices.Contains(to, "node-30"))
	// A lease duration after its sign, node-30 is asked no more.
	now := at(fanTimings.duration)
	ask, next = f.due(peers, sign, fanTimings, now)
	assert.DeepEqual(t, ask, []string(nil))
	assert.Equal(t, next, now.Add(fanTimings.suspect), "the others, heard now")
}

// A peer never heard is asked as soon as it appears among the peers; one
// that leaves is forgotten.
func TestFanoutAsksNewPeersAtOnce(t *testing.T) {
	f := newFanout()
	peers := fanPeers(10, "node-05")
	f.setPeers(peers, t0)
	none := func(string) time.Time { return time.Time{} }
	ask, _ := f.due(peers, none, fanTimings, t0)
	assert.DeepEqual(t, ask, peers)
	ask, _ = f.due(peers, none, fanTimings, t0.Add(fanTimings.duration-fanTimings.suspect))
	assert.DeepEqual(t, ask, []string(nil)) // never heard for a lease duration: judged dead
	f.setPeers(peers[1:], t0)
	_, known := f.first[peers[0]]
	assert.Assert(t, !known)
}

func TestAnswerNow(t *testing.T) {
	const s = time.Second
	fresh := t0.Add(-100 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		ofSelf   time.Duration
		reported bool
		before   time.Time
		want     bool
	}{
		{"both fresh", 200 * time.Millisecond, true, fresh, false},
		{"the peer asks", s, true, fresh, true},
		{"the peer has no sign of us", 0, false, fresh, true},
		{"the peer answers our question", 0, true, t0.Add(-s), true},
		{"a peer never heard", 0, true, time.Time{}, true},
	} {
		assert.Equal(t, answerNow(tc.ofSelf, tc.reported, tc.before, t0, s), tc.want, tc.name)
	}
}
