package agent

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/eip-project/eip/internal/lease"
)

// succession is an IP this node binds as its lock's successor (succeed).
type succession struct {
	dead time.Time // when its holder was judged dead; zero if unknown
	// contested: another eip node probed for the IP while this one did.
	// It binds only once the lock names it (docs/design.md, Succession).
	contested bool
	// binding: its write waits for its bind (succeed returned false).
	binding bool
}

// successions are the IPs this node binds as their lock's successor
// before its write names it, and the writes of those bound that wait for
// the others' binds.
//
// A bound successor's write waits while another of its successions is
// still binding, for at most one lease duration from the first write
// held: in a mass failover each write cost the API server a millisecond
// of the CPU that the binds of every survivor needed, on a machine whose
// cores they share, and the traffic flows before any write.
type successions struct {
	succeeding map[netip.Addr]succession
	binding    int // entries of succeeding with binding set
	// held are bound successions whose writes wait, since heldSince.
	held      map[netip.Addr]bool
	heldSince time.Time
	released  []netip.Addr // returned by release, its room kept

	// Where a failover is reported.
	metrics Metrics
	log     *slog.Logger
}

func newSuccessions(metrics Metrics, log *slog.Logger) successions {
	return successions{succeeding: map[netip.Addr]succession{}, held: map[netip.Addr]bool{}, metrics: metrics, log: log}
}

// begin records ip as a succession, if it is not one yet, of a holder
// judged dead as v says; begun says it was not.
func (q *successions) begin(ip netip.Addr, v lease.View, holder string) (sc succession, begun bool) {
	sc, ok := q.succeeding[ip]
	if !ok {
		sc.dead, _ = v.LostSince(holder)
		q.succeeding[ip] = sc
	}
	return sc, !ok
}

// setBinding records whether the write of succession ip waits for its
// bind. It returns the held writes to decide again: all of them once no
// succession is binding (the slice is reused by the next call).
func (q *successions) setBinding(ip netip.Addr, binding bool) (released []netip.Addr) {
	sc, ok := q.succeeding[ip]
	if !ok {
		return nil
	}
	if sc.binding != binding {
		sc.binding = binding
		q.succeeding[ip] = sc
		if binding {
			q.binding++
		} else {
			q.binding--
		}
	}
	return q.release()
}

// moves is the transition count of ip's lock lk as this node sees it
// (its own latest write, or the cache; worked out once a pass by the lock
// book), counting the move under way of an IP bound as the successor
// before the write that counts it: its route must already beat the dead
// holder's, which lingers at the router until its hold timer.
func (q *successions) moves(ip netip.Addr, lk *lease.Lock) int32 {
	var moves int32
	if lk != nil {
		moves = lk.Moves
	}
	if _, ok := q.succeeding[ip]; ok {
		moves++
	}
	return moves
}

// end forgets succession ip: bound, or no longer one. It returns the held
// writes to decide again, as setBinding does.
func (q *successions) end(ip netip.Addr) (released []netip.Addr) {
	sc, ok := q.succeeding[ip]
	if !ok {
		return nil
	}
	if sc.binding {
		q.binding--
	}
	delete(q.succeeding, ip)
	return q.release()
}

// hold holds the write of succession ip, if it is bound and waits for
// the others' binds: while one binds, for at most duration d since the
// first write held. It says until when.
func (q *successions) hold(ip netip.Addr, bound bool, now time.Time, d time.Duration) (until time.Time, held bool) {
	if !bound || q.binding == 0 || len(q.held) > 0 && !now.Before(q.heldSince.Add(d)) {
		return time.Time{}, false
	}
	if len(q.held) == 0 {
		q.heldSince = now
	}
	q.held[ip] = true
	return q.heldSince.Add(d), true
}

// release empties the held writes once no succession is binding, and
// returns them.
func (q *successions) release() []netip.Addr {
	if q.binding > 0 || len(q.held) == 0 {
		return nil
	}
	q.released = q.released[:0]
	for ip := range q.held {
		q.released = append(q.released, ip)
	}
	clear(q.held)
	return q.released
}

// bound: succession ip was bound at now. Its failover ends here, not
// when the write naming this node comes back. It returns the IPs to
// decide again now: the held writes it released, and ip, whose write
// goes now (the slice is reused by the next call).
func (q *successions) bound(ip netip.Addr, now time.Time) (wake []netip.Addr) {
	sc, ok := q.succeeding[ip]
	if !ok {
		return nil
	}
	wake = q.end(ip)
	if wake == nil {
		wake = q.released[:0]
	}
	wake = append(wake, ip)
	q.released = wake
	if !sc.dead.IsZero() {
		after := now.Sub(sc.dead)
		q.metrics.Failover(after)
		q.log.Info("took over from a dead holder as its successor", "ip", ip, "after", after)
	}
	return wake
}

// contest marks a succession whose probe met another eip node's, and says
// whether it was not marked yet.
func (q *successions) contest(ip netip.Addr) bool {
	sc, ok := q.succeeding[ip]
	if !ok || sc.contested {
		return false
	}
	sc.contested = true
	q.succeeding[ip] = sc
	return true
}
