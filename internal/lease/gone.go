package lease

import "time"

// A node out of service (View.Gone) keeps no IP, whatever its heartbeat
// says: docs/design.md, Checking the wire (node lifecycle).

// gone says whether node is out of service, and since when.
func (v View) gone(node string) (time.Time, bool) {
	if v.Gone == nil {
		return time.Time{}, false
	}
	return v.Gone(node)
}

// Keeps says whether node keeps the IPs its locks give it: it is judged
// alive and is not gone.
func (v View) Keeps(node string) bool {
	if _, gone := v.gone(node); gone {
		return false
	}
	return v.Alive(node)
}

// LostSince is since when node has kept no IP: since it was seen gone,
// or judged dead, whichever came first; ok is false when it is neither,
// or was never seen alive.
func (v View) LostSince(node string) (since time.Time, ok bool) {
	dead, isDead := v.DeadSince(node)
	gone, isGone := v.gone(node)
	switch {
	case isDead && isGone:
		return earliest(dead, gone), true
	case isGone:
		return gone, true
	}
	return dead, isDead
}

// lostWhy says why node keeps no IP: "is dead" or "is out of service".
func (v View) lostWhy(node string) string {
	if _, gone := v.gone(node); gone {
		return node + " is out of service"
	}
	return node + " is dead"
}

// decideGone decides ip, held here, while this node is gone: the others
// take its IPs at once (Keeps), so it unbinds each without a lock write
// and binds none. A hand-off written now would race the successor's own
// takeover, and its target binds without probing: two MACs.
func (v View) decideGone(ip IP) Decision {
	if ip.Bound {
		return Decision{Action: Unbind, Reason: "this node is out of service"}
	}
	return Decision{Reason: "held, but this node is out of service"}
}
