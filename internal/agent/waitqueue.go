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

// reset empties the queue for a full pass, which decides every IP again.
// The map is made anew, as a Go map keeps the room of the most it held
// (see shrink); the order keeps its room, 32 bytes an IP, so that a full
// pass of a cold start does not grow it from nothing each time.
func (q *waitQueue) reset() {
	q.at, q.nFirst = map[netip.Addr]waitEntry{}, 0
	clear(q.order)
	q.order = q.order[:0]
}

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
func (q waitQueue) firstWaiting() int { return q.nFirst }

// start begins a walk of the queue: the slots before the end it returns
// hold the IPs queued so far. IPs queued during the walk are past it.
func (q *waitQueue) start() (end int) {
	q.compact()
	return len(q.order)
}

// next is the first IP at or after slot i, before end, that still waits
// there with the given first, and the slot after it; ok is false when
// there is none. The IPs may be added and removed between calls.
func (q waitQueue) next(i, end int, first bool) (ip netip.Addr, after int, ok bool) {
	for ; i < end; i++ {
		s := q.order[i]
		if e, ok := q.at[s.ip]; ok && e.seq == s.seq && e.first == first {
			return s.ip, i + 1, true
		}
	}
	return netip.Addr{}, end, false
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
