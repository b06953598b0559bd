package agent

import "net/netip"

// waitQueue holds the acquisitions decided while they could not be sent
// (the window was full, or others go first), in the order they were
// decided, each with whether it goes first. They leave it in that order,
// so which IP a freed writer takes next depends on the inputs alone, never
// on the order of a map: a loop fed the same inputs makes the same writes.
type waitQueue struct {
	// at holds each waiting IP's entry in order; an entry whose IP left
	// or waited again later is stale and skipped.
	at     map[netip.Addr]waitEntry
	order  []waitSlot
	nFirst int
	seq    uint64
}

type waitEntry struct {
	first bool
	seq   uint64
}

type waitSlot struct {
	ip  netip.Addr
	seq uint64
}

func newWaitQueue() waitQueue { return waitQueue{at: map[netip.Addr]waitEntry{}} }

// add queues ip at the back, or moves it there.
func (q *waitQueue) add(ip netip.Addr, first bool) {
	q.remove(ip)
	q.seq++
	q.at[ip] = waitEntry{first: first, seq: q.seq}
	q.order = append(q.order, waitSlot{ip: ip, seq: q.seq})
	if first {
		q.nFirst++
	}
}

func (q *waitQueue) remove(ip netip.Addr) {
	if e, ok := q.at[ip]; ok {
		if e.first {
			q.nFirst--
		}
		delete(q.at, ip)
	}
}

// firstWaiting counts the waiting acquisitions that go first.
func (q *waitQueue) firstWaiting() int { return q.nFirst }

// each calls f, in queue order, for the IPs that wait with the given
// first and were queued before each began, until f returns false. f may
// add and remove IPs.
func (q *waitQueue) each(first bool, f func(netip.Addr) bool) {
	q.compact()
	n := len(q.order)
	for i := 0; i < n && i < len(q.order); i++ {
		s := q.order[i]
		if e, ok := q.at[s.ip]; !ok || e.seq != s.seq || e.first != first {
			continue
		}
		if !f(s.ip) {
			return
		}
	}
}

// compact drops the stale slots once they outnumber the live ones, so the
// queue's length stays within twice the IPs that wait.
func (q *waitQueue) compact() {
	if len(q.order) <= 2*len(q.at)+64 {
		return
	}
	live := q.order[:0]
	for _, s := range q.order {
		if e, ok := q.at[s.ip]; ok && e.seq == s.seq {
			live = append(live, s)
		}
	}
	clear(q.order[len(live):])
	q.order = live
}
