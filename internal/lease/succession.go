package lease

import "time"

// successorDeadline is when the others stop leaving ip to the successor
// its lock names: SuccessorWait after its holder was judged dead, or after
// this node saw the IP without a live holder when it never saw the holder.
func (v View) successorDeadline(ip IP) time.Time {
	since, ok := v.LostSince(ip.Lock.Holder)
	if !ok {
		since = ip.FreeSince
	}
	return since.Add(v.SuccessorWait)
}

// raceBehind is race for an Acquire in which first, a live node other than
// this one, holds the first rank whatever its score.
func (v View) raceBehind(ip IP, first string, since time.Time, why string) Decision {
	v.first = first
	if ip.Planned == first {
		ip.Planned = ""
	}
	return v.race(ip, since, Acquire, why)
}

// successorWrite says whether this node, holding ip, names another
// successor (n), or else when it may have to (at; zero when it may not).
// A successor stays named while it is a live node the IP may go to, even
// when a better-ranked one joins: the lock is rewritten only when its
// successor is gone, so node churn costs no write per IP. Gone is not
// live for SuccessorGrace, or never seen live since this node started; a
// lock that names none gets one as soon as a peer may hold it.
func (v View) successorWrite(ip IP) (n string, at time.Time, ok bool) {
	cur := ip.Lock.Successor
	if cur != "" && cur != v.Self && v.isLive(cur) {
		return "", time.Time{}, false
	}
	n = v.successorFor(ip, v.Self)
	if n == cur || n == "" {
		return "", time.Time{}, false
	}
	if cur != "" && cur != v.Self && ip.Only.Allows(cur) && v.LiveUntil != nil {
		// One the IP no longer allows (its Service's endpoints moved) is
		// replaced at once: that is no churn of nodes.
		if last, seen := v.LiveUntil(cur); seen && v.Now.Before(last.Add(v.SuccessorGrace)) {
			return "", last.Add(v.SuccessorGrace), false
		}
	}
	return n, time.Time{}, true
}

// succession decides an IP whose lock names a successor, when its holder,
// another node, is judged dead or is gone (docs/design.md, Succession). The
// successor holds it by the lock's own terms: it binds, then writes the
// lock naming itself. The others leave the IP to it while it is a live
// node the IP may go to, for SuccessorWait; then they race behind it. A pending move, a successor that is not live,
// or one that cannot act as such (not eligible, no endpoint of the IP's
// Service here) leaves the IP to the race (ok false).
func (v View) succession(ip IP) (d Decision, ok bool) {
	lk := ip.Lock
	s := lk.Successor
	if s == "" || lk.Holder == "" || s == lk.Holder || lk.MoveTo != "" || v.holderBack(ip) {
		return Decision{}, false
	}
	why := "holder " + v.lostWhy(lk.Holder)
	switch {
	case s != v.Self:
		if ip.Bound || !v.isLive(s) {
			return Decision{}, false
		}
		deadline := v.successorDeadline(ip)
		if v.Now.Before(deadline) {
			return Decision{At: deadline, Reason: why + "; its successor " + s + " takes it over"}, true
		}
		// The successor had its time: the others race from the deadline,
		// behind it, so that it still wins if it acts now.
		return v.raceBehind(ip, s, deadline, why+"; its successor "+s+" has not taken it over"), true
	case !v.Eligible || !ip.Only.Allows(v.Self):
		return Decision{}, false
	case !v.Writable:
		// Bound, it is held (as a holder that may not write keeps what it
		// holds); unbound, it waits for a current view of the lock.
		return Decision{Reason: why + "; successor, once this node may write", ReadWritable: true}, true
	}
	return Decision{Action: Succeed, Successor: v.successorFor(ip, v.Self), Reason: why + "; this node is its successor", ReadWritable: true}, true
}
