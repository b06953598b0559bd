package agent

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/netif"
)

// maxProbeBackoff caps the wait between probes of an address found in use,
// so that eip binds it within a few seconds of its other user letting go.
const maxProbeBackoff = 4 * time.Second

// addrConflicts is what this node knows about addresses in use on the LAN
// by machines that are not eip nodes.
//
// Before binding an IP that no eip node was serving (its lock was created
// or taken free by this node), the node probes the LAN from the IP's
// interface: two probes (ARP probe, RFC 5227, or a DAD neighbour
// solicitation) half a probe wait apart, and binds once a whole probe wait
// passed without an answer. An answer (a claim from another MAC) means the
// address is in use: it is not bound, a Warning event AddressConflict names
// the MAC, and it is probed again after 1 s, 2 s, then every 4 s. The node
// keeps the lock meanwhile: releasing it would have every other node
// acquire, probe and report the same conflict in turn.
type addrConflicts struct {
	fresh   map[netip.Addr]bool // won from nobody: probe before binding
	probing map[netip.Addr]probeRun
	inUse   map[netip.Addr]inUse
	// claimed: the MAC last reported claiming an address this node holds.
	claimed map[netip.Addr]string
}

type probeRun struct {
	iface         string
	started, last time.Time // the first probe and the latest
	sent          int
}

type inUse struct {
	mac      string
	attempts int
	retry    time.Time
}

func newAddrConflicts() addrConflicts {
	return addrConflicts{fresh: map[netip.Addr]bool{}, probing: map[netip.Addr]probeRun{}, inUse: map[netip.Addr]inUse{}, claimed: map[netip.Addr]string{}}
}

// forget drops everything known about ip: it is no longer this node's.
func (c *addrConflicts) forget(ip netip.Addr) {
	delete(c.fresh, ip)
	delete(c.probing, ip)
	delete(c.inUse, ip)
	delete(c.claimed, ip)
}

// probed says whether ip may be bound on iface now: it needs no probe, or
// a probe wait passed without an answer. Otherwise it sends the probes that
// are due and wakes the loop when the next step is.
func (s *state) probed(ip netip.Addr, iface string) bool {
	wait := s.a.opt.ProbeWait
	c := &s.conflicts
	if wait <= 0 || !c.fresh[ip] {
		return true
	}
	now := s.a.clk.Now()
	if u, ok := c.inUse[ip]; ok && now.Before(u.retry) {
		s.wakeAt(u.retry)
		return false
	}
	p, ok := c.probing[ip]
	if !ok || p.iface != iface {
		s.watchClaims(iface)
		p = probeRun{iface: iface, started: now}
	}
	if p.sent < 2 && !now.Before(p.started.Add(time.Duration(p.sent)*wait/2)) {
		if err := s.a.opt.Announcer.Probe(iface, ip); err != nil {
			s.log.Warn("probe", "ip", ip, "iface", iface, "err", err)
		}
		p.sent++
		p.last = now
	}
	c.probing[ip] = p
	if p.sent < 2 {
		s.wakeAt(p.started.Add(wait / 2))
		return false
	}
	// Each probe gets at least half a wait for its answer.
	if done := later(p.started.Add(wait), p.last.Add(wait/2)); now.Before(done) {
		s.wakeAt(done)
		return false
	}
	delete(c.probing, ip)
	delete(c.fresh, ip)
	if u, ok := c.inUse[ip]; ok {
		delete(c.inUse, ip)
		s.log.Info("address no longer in use on the LAN; binding it", "ip", ip, "iface", iface, "mac", u.mac)
		s.event(ip, corev1.EventTypeNormal, "AddressFree", fmt.Sprintf("%s is no longer answered by %s; %s binds it", ip, u.mac, s.a.opt.Node))
	}
	return true
}

// conflictClaim handles a claim for an address being probed or held, and
// says whether it did.
func (s *state) conflictClaim(cl netif.Claim) bool {
	c := &s.conflicts
	now := s.a.clk.Now()
	if p, ok := c.probing[cl.IP]; ok && p.iface == cl.Iface {
		delete(c.probing, cl.IP)
		prev := c.inUse[cl.IP]
		u := inUse{mac: cl.MAC.String(), attempts: prev.attempts + 1}
		u.retry = now.Add(min(time.Second<<(u.attempts-1), maxProbeBackoff))
		c.inUse[cl.IP] = u
		s.wakeAt(u.retry)
		s.a.opt.Metrics.AddressConflict()
		if prev.mac != u.mac {
			s.log.Warn("address in use on the LAN by a machine that is not an eip node; not binding it", "ip", cl.IP, "iface", cl.Iface, "mac", u.mac)
			s.event(cl.IP, corev1.EventTypeWarning, "AddressConflict",
				fmt.Sprintf("%s is in use on the LAN by %s: %s does not bind it and probes again until it is free", cl.IP, u.mac, s.a.opt.Node))
		}
		return true
	}
	if _, bound := s.bound[cl.IP]; !bound || !s.apiOK(now) {
		return false
	}
	// A claim for an address this node holds while its renewals succeed:
	// no eip node may claim it (a peer takes an address over only after
	// this node stopped renewing, and a move is handed off by this node),
	// so a stranger uses it. eipd keeps serving it and does not answer
	// with an announcement of its own, which a stranger that defends its
	// address would answer in turn.
	s.a.opt.Metrics.ForeignClaim()
	if mac := cl.MAC.String(); c.claimed[cl.IP] != mac {
		c.claimed[cl.IP] = mac
		s.log.Warn("a machine that is not an eip node claims an address this node holds", "ip", cl.IP, "iface", cl.Iface, "mac", mac)
		s.event(cl.IP, corev1.EventTypeWarning, "AddressClaimed",
			fmt.Sprintf("%s, bound on %s, is also claimed on the LAN by %s: two machines answer for it until that one lets go", cl.IP, s.a.opt.Node, mac))
	}
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
