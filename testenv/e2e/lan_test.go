package e2e

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Liveness over the LAN (docs/design.md): eipds tell each other they are
// alive in UDP datagrams and renew their heartbeat Leases slowly; a lock
// Lease stays the only arbiter of who holds an IP.

const livenessPort = config.DefaultLivenessPort

// With three nodes hearing each other, every heartbeat names the liveness
// port and its format and lasts ten lease durations: the API server sees one renewal per
// node every five seconds.
func TestLANHeartbeatsRenewSlowly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.eventually("slow heartbeats", func() (bool, string) {
		for _, n := range e.nodes {
			l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(n), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if got := l.Annotations[lease.AnnotationLivenessPort]; got != strconv.Itoa(livenessPort) {
				return false, fmt.Sprintf("%s: liveness port %q", n, got)
			}
			if d := l.Spec.LeaseDurationSeconds; d == nil || *d != 10*int32(leaseDuration/time.Second) {
				return false, fmt.Sprintf("%s: lease duration %v", n, d)
			}
			// Through the API server, the format still goes with the
			// renewal that wrote it (microseconds, in protobuf).
			if hb, err := lease.ParseHeartbeat(l); err != nil || !hb.LivenessCurrent {
				return false, fmt.Sprintf("%s: liveness format %q at %v (%v)", n, l.Annotations[lease.AnnotationLivenessFormat], l.Spec.RenewTime, err)
			}
		}
		return true, ""
	})
}

// The holder's liveness datagrams are lost on their way out (a firewall
// rule, a dropped queue) while it still serves and reaches the API server.
// Its peers hear each other and will judge it dead; it hears their reports
// that they no longer hear it and hands its IP to a peer it hears,
// unbinding it just before. The client never sees two MACs. When its
// datagrams flow again it takes nothing back.
func TestLANHolderUnheard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(141)
	st := e.startPoint(ip)
	old, p, w, mark := st.holders[ip], st.probes[ip], st.w, st.mark

	e.must(e.c.BlockUDP(e.ctx, old, livenessPort, true, false))
	blocked := time.Now()
	unblock := func() error { return e.c.UnblockUDP(e.ctx, old) }
	t.Cleanup(func() { _ = unblock() })

	next := e.takenOver(ip, old, p)
	e.logged(mark, old, "a peer no longer hears this node over the LAN")
	e.eventually(old+" says why it holds nothing", func() (bool, string) {
		hb := e.heartbeat(old)
		return hb[lease.AnnotationEligible] == "false", fmt.Sprint(hb)
	})
	e.t.Logf("%s answered %s after the block", next, firstReplyFrom(p.Result(), e.mac(next), blocked))

	e.must(unblock())
	e.eventually(old+" heard again and eligible", func() (bool, string) {
		hb := e.heartbeat(old)
		return hb[lease.AnnotationEligible] == "true", fmt.Sprint(hb)
	})
	e.throughout(old+" heard again: takes nothing back", 3*leaseDuration,
		e.stillAnswering(map[netip.Addr]*testenv.Probe{ip: p}, map[netip.Addr]string{ip: next}, time.Second))

	r := p.Stop()
	e.clientView("holder "+old+"'s liveness datagrams lost", r)
	e.noTwoMACs(r)
	rep := w.report()[ip]
	t.Log(rep)
	assert.Check(t, len(rep.double) == 0, "bound on two nodes: %s", rep)
	e.warningSince("Service", "web", "Unheard", blocked, old+" hands "+ip.String()+" to a peer", "peers do not hear its liveness datagrams")
}

// The LAN between the holder and one peer is cut both ways, for liveness
// datagrams only; the third node hears both and reports each to the
// other. Nobody is judged dead and nothing moves.
func TestLANPairCutNothingMoves(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(142)
	st := e.startPoint(ip)
	old := st.holders[ip]
	var peer string
	for _, n := range e.nodes {
		if n != old {
			peer = n
			break
		}
	}
	e.must(e.c.BlockUDP(e.ctx, old, livenessPort, true, true, peer))
	t.Cleanup(func() { _ = e.c.UnblockUDP(e.ctx, old) })

	e.throughout(old+" and "+peer+" cannot hear each other: nothing moves", 4*leaseDuration,
		e.stillAnswering(st.probes, st.holders, time.Second))
	e.assertNothingMoved(st.before, e.lockStates(ip))
	r := st.probes[ip].Stop()
	e.clientView("liveness cut between "+old+" and "+peer, r)
	e.noTwoMACs(r)
	assert.Check(t, len(r.MACs()) == 1, "answered by %v", r.MACs())
	rep := st.w.report()[ip]
	assert.Check(t, len(rep.double) == 0 && len(rep.unbound) == 0, "%s", rep)
}
