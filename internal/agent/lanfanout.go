package agent

import (
	"slices"
	"time"
)

// Fan-out of liveness over the LAN (docs/design.md, Liveness over the LAN).
// Each renew interval a node sends its datagram to a few peers, not to all
// of them: the two that follow it in name order (so that every node hears
// two peers every renew interval), and two more in turn. Each datagram
// carries the sender's latest sign of life of every node, so signs spread
// from peer to peer, a renew interval or two late. A peer whose latest
// sign grows suspect old (lease.SuspectAfter) is asked directly, at once,
// and answers at once. So the datagrams a node sends and receives stay
// about the same whatever the number of nodes (about seven a renew interval at
// fifty nodes, against 49 to every peer), no live peer's sign gets older
// than suspect while the LAN between the two works, and a peer that stops
// hearing a node tells it so.

const (
	// ringFanout is how many of the peers that follow a node in name order
	// get its datagram every renew interval.
	ringFanout = 2
	// turnFanout is how many more peers get it, in turn.
	turnFanout = 2
)

// fanout chooses where a node's datagrams go. Not safe for concurrent use.
type fanout struct {
	// next is where the turn resumes among the peers outside the ring.
	next int
	// asked is when each suspect peer was last asked directly; first when
	// each peer was first among the peers, so that a new one is asked at
	// once.
	asked, first map[string]time.Time
}

func newFanout() *fanout {
	return &fanout{asked: map[string]time.Time{}, first: map[string]time.Time{}}
}

// lanTimings are what the fan-out needs of the configuration: the renew
// interval, lease.SuspectAfter and the lease duration.
type lanTimings struct {
	renew, suspect, duration time.Duration
}

// setPeers records the peers (every node whose heartbeat names a liveness
// port, this one excepted) and forgets the ones that went.
func (f *fanout) setPeers(peers []string, now time.Time) {
	for _, p := range peers {
		if _, ok := f.first[p]; !ok {
			f.first[p] = now
		}
	}
	for p := range f.first {
		if !slices.Contains(peers, p) {
			delete(f.first, p)
			delete(f.asked, p)
		}
	}
}

// tick returns the peers this renew interval's datagram goes to: all of
// them when they are few, else the ring and the next in turn, and every
// suspect peer (see due). peers are sorted; sign is this node's latest
// sign of life of a peer (zero: none).
func (f *fanout) tick(self string, peers []string, sign func(string) time.Time, t lanTimings, now time.Time) []string {
	if len(peers) <= ringFanout+turnFanout {
		for _, p := range peers {
			f.asked[p] = now
		}
		return slices.Clone(peers)
	}
	at, _ := slices.BinarySearch(peers, self)
	to := make([]string, 0, ringFanout+turnFanout+4)
	for i := range ringFanout {
		to = append(to, peers[(at+i)%len(peers)])
	}
	rest := len(peers) - ringFanout
	for i := range turnFanout {
		// The peers outside the ring follow it in name order.
		to = append(to, peers[(at+ringFanout+(f.next+i)%rest)%len(peers)])
	}
	f.next = (f.next + turnFanout) % rest
	for _, p := range to {
		f.asked[p] = now
	}
	ask, _ := f.due(peers, sign, t, now)
	return append(to, ask...)
}

// due returns the suspect peers to ask directly at now: those whose latest
// sign is at least suspect old, not yet a lease duration old (a peer judged
// dead is reached in turn only), and not asked within a renew interval.
// next is when the next one will be due if no sign arrives meanwhile.
func (f *fanout) due(peers []string, sign func(string) time.Time, t lanTimings, now time.Time) (ask []string, next time.Time) {
	for _, p := range peers {
		// A peer never heard counts as heard suspect ago when it first
		// appeared: it is asked at once.
		from := later(sign(p), f.first[p].Add(-t.suspect))
		dead := from.Add(t.duration)
		at := later(from.Add(t.suspect), f.asked[p].Add(t.renew))
		if !now.Before(dead) || !at.Before(dead) {
			continue
		}
		if at.After(now) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		f.asked[p] = now
		ask = append(ask, p)
	}
	return ask, next
}

// answerNow reports whether a datagram from a peer is answered at once,
// with this node's own datagram to that peer alone: when the peer's
// latest sign of this node is suspect old or it has none (it is asking),
// or when this node's latest sign of the peer was (it is answering our
// question, and learns that we hear it again). The exchange ends there:
// each side's sign of the other is then fresh.
func answerNow(ofSelf time.Duration, reported bool, before, now time.Time, suspect time.Duration) bool {
	return !reported || ofSelf >= suspect || before.IsZero() || now.Sub(before) >= suspect
}
