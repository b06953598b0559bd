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

// sessionDownGrace is how long a session may take to come up before a
// Warning event says it has not: a connection attempt comes every one to
// two seconds.
const sessionDownGrace = 10 * time.Second

// sessionSeen is what this node last saw of one BGP session.
type sessionSeen struct {
	up        bool
	downSince time.Time // when it was last seen down, while it is
	warned    bool      // a Warning event says it is down
}

// observeSessions reads the BGP sessions for the heartbeat, and records an
// event on this node's Node when one comes up, goes down, or does not come
// up within sessionDownGrace (an unreachable peer, a wrong AS number).
func (s *state) observeSessions() {
	now := s.a.clk.Now()
	sessions := s.a.opt.Router.Sessions()
	out := make([]lease.BGPSession, 0, len(sessions))
	seen := make(map[netip.Addr]sessionSeen, len(sessions))
	for _, sess := range sessions {
		ls := lease.BGPSession{Peer: sess.Peer.String(), State: sess.State}
		if sess.Up() {
			since := sess.Since.UTC().Truncate(time.Second)
			ls.Since = &since
		}
		out = append(out, ls)
		was, known := s.routes.sessions[sess.Peer]
		next := sessionSeen{up: sess.Up(), downSince: was.downSince, warned: was.warned}
		switch {
		case sess.Up():
			next.downSince, next.warned = time.Time{}, false
			if !was.up {
				s.sessionEvent(sess, corev1.EventTypeNormal, "BGPSessionUp", "established")
			}
		case was.up:
			next.downSince, next.warned = now, true
			s.sessionEvent(sess, corev1.EventTypeWarning, "BGPSessionDown", "went down ("+sess.State+"): this node's routes no longer reach that router")
		case !known:
			next.downSince = now
		case !was.warned && now.Sub(was.downSince) >= sessionDownGrace:
			next.warned = true
			s.sessionEvent(sess, corev1.EventTypeWarning, "BGPSessionDown", fmt.Sprintf("not established after %s (%s): check the peer's address and port, its AS number and this node's (bgp-asn %d), the password, and that the router accepts this node",
				sessionDownGrace, sess.State, s.desired.cfg.BGP.ASN))
		}
		seen[sess.Peer] = next
	}
	s.routes.sessions = seen
	s.routes.bgpSessions = lease.FormatBGPSessions(out)
	s.a.opt.Metrics.BGP(sessions, s.routes.announced)
}

func (s *state) sessionEvent(sess bgp.Session, kind, reason, what string) {
	msg := fmt.Sprintf("BGP session of %s with %s (AS %d) %s", s.a.opt.Node, sess.Peer, sess.ASN, what)
	s.log.Info("BGP session", "peer", sess.Peer, "state", sess.State, "event", reason)
	if n, err := s.a.nodes.Get(s.a.opt.Node); err == nil {
		s.a.recorder.Event(n, kind, reason, msg)
	}
}

// configureRouter hands the configuration in force to the router, and
// keeps why it was refused for the heartbeat's status. The router ID is
// the node's lowest internal IPv4 address, unique per node.
func (s *state) configureRouter() {
	var routerID netip.Addr
	if n, err := s.a.nodes.Get(s.a.opt.Node); err == nil {
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err == nil && ip.Is4() && a.Type == corev1.NodeInternalIP && (!routerID.IsValid() || ip.Less(routerID)) {
				routerID = ip
			}
		}
	}
	if err := s.a.opt.Router.Configure(s.desired.cfg, routerID); err != nil {
		if s.routes.routerErr != err.Error() {
			s.log.Error("route mode", "err", err)
		}
		s.routes.routerErr = err.Error()
		return
	}
	s.routes.routerErr = ""
}

// retryRouter configures the router again if it refused the configuration
// in force: what it could not do (read a password's Secret, start the
// speaker) may work now.
func (s *state) retryRouter() {
	if s.routes.routerErr != "" {
		s.configureRouter()
	}
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
	if l := s.book.effective(name, s.a.lock(name)); l != nil {
		return l.Moves
	}
	return 0
}

// announceRoute announces a just bound IP; a failure is logged, and the
// IP stays bound: the router may still learn it once the speaker recovers.
func (s *state) announceRoute(ip netip.Addr, e ipset.Entry) bgp.Route {
	moves := s.movesOf(ip)
	if _, ok := s.succ.succeeding[ip]; ok {
		// Bound as the successor before the write that counts this move:
		// the route must already beat the dead holder's, which lingers at
		// the router until its hold timer.
		moves++
	}
	r := s.routeFor(ip, e, bgp.MEDFor(moves))
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
	s.binder.bound[ip] = b
}
