package lease

import "time"

// The decisions below take away what this node has bound for a reason of
// its own standing, not of one lock: every address it unbinds is unbound
// by a Decision, these or Decide's. Each says Unbind, or None, perhaps with
// the time At it should be asked again.

// DecideFence is api-loss=fence: once fenceAfter has passed since the last
// renewal the API server took was sent, and no later one succeeded, a node
// unbinds everything, before a peer may judge it dead and take over.
// lastRenewSent is zero before the first renewal: nothing to fence yet.
func DecideFence(lastRenewSent, now time.Time, fenceAfter time.Duration, apiOK bool) Decision {
	switch {
	case lastRenewSent.IsZero():
		return Decision{Reason: "not renewed yet"}
	case !Fenced(lastRenewSent, now, fenceAfter):
		return Decision{At: lastRenewSent.Add(fenceAfter), Reason: "renewed within fence-after"}
	case apiOK:
		return Decision{Reason: "renewing again"}
	}
	return Decision{Action: Unbind, Reason: "fenced: no successful renewal within fence-after"}
}

// Claim is another machine's ARP or NDP frame claiming an address this
// node has bound, as the loop judged it.
type Claim struct {
	MAC string
	// Probe: the frame was a probe (another node about to bind), not an
	// announcement.
	Probe bool
	// Peer: the MAC is an eip node's.
	Peer bool
}

// DecideClaim answers a claim of a bound address that no conflict rule
// settled. While this node can reach the API server the lock decides who
// binds, and a claim changes nothing. Cut off from it, an announcement
// means another node bound the address (it took the lock), and so does a
// peer's probe once peers may have judged this node dead: unbinding then
// leaves one MAC answering. A stranger's probe never takes an address away.
func DecideClaim(c Claim, apiOK, mayBeJudgedDead bool) Decision {
	if apiOK || c.Probe && (!c.Peer || !mayBeJudgedDead) {
		return Decision{Reason: "claim by " + c.MAC + " left to the lock"}
	}
	return Decision{Action: Unbind, Reason: "claimed by " + c.MAC + " while the API server is unreachable"}
}

// DecideLinkDown: an address on an interface that lost its carrier is
// unbound; it is bound again, by Decide, once the link is up.
func DecideLinkDown() Decision {
	return Decision{Action: Unbind, Reason: "link lost carrier"}
}

// DecideStopped: a node that stops unbinds what it still has once its
// hand-offs were answered or given up.
func DecideStopped() Decision {
	return Decision{Action: Unbind, Reason: "shutting down"}
}
