package agent

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// Router announces host routes for the IPs this node holds in route-mode
// ranges (bgp.Router).
type Router interface {
	// Configure applies the configuration in force; routerID is this
	// node's IPv4 address, used unless the configuration names one.
	Configure(cfg config.Config, routerID netip.Addr) error
	// Announce announces r, or replaces the route announced for r.IP.
	Announce(r bgp.Route) error
	// Withdraw withdraws the route for ip, if any.
	Withdraw(ip netip.Addr) error
	// Sessions lists the BGP sessions and their states.
	Sessions() []bgp.Session
}

type nopRouter struct{}

func (nopRouter) Configure(config.Config, netip.Addr) error { return nil }
func (nopRouter) Announce(bgp.Route) error                  { return nil }
func (nopRouter) Withdraw(netip.Addr) error                 { return nil }
func (nopRouter) Sessions() []bgp.Session                   { return nil }

// observeSessions reads the BGP sessions for the heartbeat, and records an
// event on this node's Node when one comes up or goes down.
func (s *state) observeSessions() {
	sessions := s.a.opt.Router.Sessions()
	out := make([]lease.BGPSession, 0, len(sessions))
	up := make(map[netip.Addr]bool, len(sessions))
	for _, sess := range sessions {
		ls := lease.BGPSession{Peer: sess.Peer.String(), State: sess.State}
		if sess.Up() {
			since := sess.Since.UTC().Truncate(time.Second)
			ls.Since = &since
		}
		out = append(out, ls)
		up[sess.Peer] = sess.Up()
		if was, known := s.sessionUp[sess.Peer]; known && was == sess.Up() || !known && !sess.Up() {
			continue
		}
		kind, reason, msg := corev1.EventTypeNormal, "BGPSessionUp", fmt.Sprintf("BGP session of %s with %s (AS %d) established", s.a.opt.Node, sess.Peer, sess.ASN)
		if !sess.Up() {
			kind, reason, msg = corev1.EventTypeWarning, "BGPSessionDown", fmt.Sprintf("BGP session of %s with %s (AS %d) is down (%s): routes of this node no longer reach that router", s.a.opt.Node, sess.Peer, sess.ASN, sess.State)
		}
		s.log.Info("BGP session changed", "peer", sess.Peer, "state", sess.State)
		if n, err := s.a.nodes.Get(s.a.opt.Node); err == nil {
			s.a.recorder.Event(n, kind, reason, msg)
		}
	}
	s.sessionUp = up
	s.bgpSessions = lease.FormatBGPSessions(out)
	s.a.opt.Metrics.BGP(sessions, s.routes)
}

// configureRouter hands the configuration in force to the router, and
// keeps why it was refused for the heartbeat's status.
func (s *state) configureRouter() {
	var routerID netip.Addr
	for a, node := range s.reserved {
		if node == s.a.opt.Node && a.Is4() && (!routerID.IsValid() || a.Less(routerID)) {
			routerID = a
		}
	}
	if err := s.a.opt.Router.Configure(s.cfg, routerID); err != nil {
		if s.routerErr != err.Error() {
			s.log.Error("route mode", "err", err)
		}
		s.routerErr = err.Error()
		return
	}
	s.routerErr = ""
}

// routeFor is the route announcing ip, held with e's binding: its MED
// falls with each change of holder, see bgp.MEDFor.
func (s *state) routeFor(ip netip.Addr, e ipset.Entry, med uint32) bgp.Route {
	r := bgp.Route{IP: ip, MED: med}
	if rg := e.Binding.Range; rg != nil {
		r.LocalPref, r.Communities = rg.LocalPref, rg.Communities
	}
	return r
}

// movesOf is the transition count of ip's lock as this node sees it: its
// own latest write, or the cache.
func (s *state) movesOf(ip netip.Addr) int32 {
	name := lease.NameFor(ip)
	l, _ := s.a.leases.Get(name)
	if l = s.effective(name, l, s.a.clk.Now()); l != nil && l.Spec.LeaseTransitions != nil {
		return *l.Spec.LeaseTransitions
	}
	return 0
}

// announceRoute announces a just bound IP; a failure is logged, and the
// IP stays bound: the router may still learn it once the speaker recovers.
func (s *state) announceRoute(ip netip.Addr, e ipset.Entry) bgp.Route {
	r := s.routeFor(ip, e, bgp.MEDFor(s.movesOf(ip)))
	if err := s.a.opt.Router.Announce(r); err != nil {
		s.log.Error("announce route", "ip", ip, "err", err)
	}
	return r
}

// reannounceIfChanged updates the route of a bound IP whose range's route
// attributes changed with the configuration.
func (s *state) reannounceIfChanged(ip netip.Addr, b binding, e ipset.Entry) {
	if !b.announce.BGP() {
		return
	}
	r := s.routeFor(ip, e, b.route.MED)
	if r.Equal(b.route) {
		return
	}
	if err := s.a.opt.Router.Announce(r); err != nil {
		s.log.Error("announce route", "ip", ip, "err", err)
	}
	b.route = r
	s.bound[ip] = b
}
