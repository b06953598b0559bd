package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
)

// binding is an address this node has put on an interface.
type binding struct {
	iface    string // where it is announced and probed
	dev      string // where the address is: iface, or one of eipd's devices
	missing  bool   // removed by someone else and not restored yet
	prefix   netip.Prefix
	announce config.Announce
	route    bgp.Route // announced when announce.BGP()
}

// binder is what this node has bound, and on which interface or device.
type binder struct {
	bound map[netip.Addr]binding
	// ownRemovals counts, per IP, the removals this node made whose
	// address events have not come back yet (see addrEvent).
	ownRemovals map[netip.Addr]int
	linkDown    map[string]bool
	claimWatch  map[string]context.CancelFunc
	backlogs    []*netif.Backlog // one per claim watch
	claimed     *claimedSet
	autoIface   map[netip.Addr]string // "auto" resolved, see ifaceFor
	arpAnswers  map[string]bool       // per LAN interface, see placeOnDevice
	macs        string                // ownMACs; "" until listed, and after a link changed
	devices     addressDevices

	log         *slog.Logger
	links       Links
	devs        Devices // eipd's own address devices
	addresser   Addresser
	announcer   Announcer
	lifetime    *keeper // refreshes the lifetimes of the addresses on an interface
	watchClaims ClaimWatcher
	claims      chan netif.Claim // what the claim watches see
}

// place puts ip's address where bd says, for lifetime, and announces it
// on the LAN if bd is announced there, watching the claims on its
// interface; onDevice says it goes on one of eipd's devices, whose
// addresses do not expire, rather than on its interface, where the
// keeper refreshes it. bd is not held yet: the loop holds it once its
// route is announced too.
func (b *binder) place(ip netip.Addr, bd binding, onDevice bool, lifetime time.Duration) error {
	b.listenFor(ip) // before the kernel may answer for it
	if err := b.addresser.Add(bd.dev, bd.prefix, lifetime); err != nil {
		return err
	}
	if !onDevice {
		b.lifetime.keep(ip, netif.Bound{Iface: bd.dev, Prefix: bd.prefix})
	}
	if bd.announce.ARP() {
		b.announce(bd.iface, ip)
		b.watchClaimsOn(bd.iface)
	}
	return nil
}

// announce announces ip on iface, as a bind and a restore do.
func (b *binder) announce(iface string, ip netip.Addr) {
	if err := b.announcer.Announce(iface, ip); err != nil {
		b.log.Warn("announce", "ip", ip, "iface", iface, "err", err)
	}
}

// forget stops serving ip, bound as bd, on the LAN (announcements,
// lifetime refresh) and forgets its binding; the address itself is left
// alone.
func (b *binder) forget(ip netip.Addr, bd binding) {
	b.announcer.Stop(ip)
	b.release(ip)
	if !bd.onDevice() {
		b.lifetime.forget(ip)
	}
}

// remove takes the address of bd, ip's binding forgotten already, off its
// device. A removal of an address that was there is this node's own: its
// event is not a vanishing (ownRemoval).
func (b *binder) remove(ip netip.Addr, bd binding) {
	if err := b.addresser.Del(bd.dev, bd.prefix); err != nil {
		b.log.Error("unbind", "ip", ip, "iface", bd.dev, "err", err)
	} else if !bd.missing {
		b.removedOwn(ip)
	}
}

// restore puts back held address bd, gone from its device, for lifetime,
// and announces it again.
func (b *binder) restore(bd binding, lifetime time.Duration) {
	ip := bd.prefix.Addr()
	if err := b.addresser.Add(bd.dev, bd.prefix, lifetime); err != nil {
		b.log.Error("restore address", "ip", ip, "iface", bd.dev, "err", err)
		return
	}
	bd.missing = false
	b.update(bd)
	if bd.announce.ARP() {
		b.announce(bd.iface, ip)
	}
	b.log.Info("restored an address removed from the interface", "ip", ip, "iface", bd.dev)
}

// sweep lists the addresses on iface, on which bound bindings are held,
// removes those stale says this node must not have (in its ranges, not
// held), and returns the bindings held on iface whose address is missing.
func (b *binder) sweep(iface string, bound int, stale func(netip.Addr) bool) []binding {
	have, err := b.addresser.List(iface)
	if err != nil {
		b.log.Warn("resync: list addresses", "iface", iface, "err", err)
		return nil
	}
	// found counts the bindings here listed as bound; the set of the
	// addresses present is made only if some are not.
	found := 0
	for _, p := range have {
		ip := p.Addr()
		if bd, ok := b.bound[ip]; ok && bd.dev == iface {
			if bd.prefix == p {
				found++
			}
			continue
		}
		if !stale(ip) {
			continue
		}
		b.log.Info("removing an address in our ranges that this node does not hold", "ip", ip, "iface", iface)
		if err := b.addresser.Del(iface, p); err != nil {
			b.log.Error("remove stale address", "ip", ip, "iface", iface, "err", err)
		}
	}
	if found == bound {
		return nil
	}
	present := make(map[netip.Addr]bool, len(have))
	for _, p := range have {
		present[p.Addr()] = true
	}
	var missing []binding
	for ip, bd := range b.bound {
		if bd.dev == iface && !present[ip] {
			missing = append(missing, bd)
		}
	}
	return missing
}

// ifaceFor resolves the interface an address is bound on. Resolving
// "auto" lists every address of the node, and every pass asks for every
// bound IP, so the answers are kept until a link or an address other than
// a managed IP changes (netif.Watch reports both, re-listing after a
// dropped notification).
func (b *binder) ifaceFor(ip netip.Addr, on config.Binding) (string, error) {
	if on.Iface != "" && on.Iface != "auto" {
		return on.Iface, nil
	}
	if iface, ok := b.autoIface[ip]; ok {
		return iface, nil
	}
	iface, err := b.links.IfaceFor(ip)
	if err == nil {
		b.autoIface[ip] = iface
	}
	return iface, err
}

// onDevice says whether address p, announced on iface, goes on one of
// eipd's devices rather than on iface.
func (b *binder) onDevice(iface string, p netip.Prefix, a config.Announce) bool {
	return (!a.ARP() || p.Addr().Is4() && p.IsSingleIP()) && placeOnDevice(p, a, b.answersARP(iface))
}

// answersARP is Links.AnswersARP, read once per interface and again at
// each resync (checkARP).
func (b *binder) answersARP(iface string) bool {
	if v, ok := b.arpAnswers[iface]; ok {
		return v
	}
	v, err := b.links.AnswersARP(iface)
	switch {
	case err != nil:
		b.log.Warn("cannot tell whether the kernel answers ARP for addresses on eipd's device; binding IPv4 addresses on the interface itself", "iface", iface, "err", err)
	case !v:
		b.log.Info("arp_ignore is not 0: the kernel answers ARP only for addresses of the interface itself, so IPv4 addresses are bound there, with a lifetime", "iface", iface)
	}
	b.arpAnswers[iface] = v
	return v
}

// checkARP reads arp_ignore again: a change moves the addresses affected
// at the next full pass (rebindIfMoved).
func (b *binder) checkARP() (changed bool) {
	for iface, was := range b.arpAnswers {
		delete(b.arpAnswers, iface)
		if b.answersARP(iface) != was {
			changed = true
		}
	}
	return changed
}

// pickDevice is the address device for the next address on one
// (addressDevices.pick).
func (b *binder) pickDevice(now time.Time) (string, error) {
	return b.devices.pick(b.devs, now)
}

// listenFor watches the claims for ip: before the kernel may answer for
// it, or an answer to a probe may come.
func (b *binder) listenFor(ip netip.Addr) { b.claimed.add(ip) }

// listenOnly stops watching the claims for the IPs keep does not keep.
func (b *binder) listenOnly(keep func(netip.Addr) bool) { b.claimed.keepOnly(keep) }

// hold records bd, just bound for ip, and counts its device.
func (b *binder) hold(ip netip.Addr, bd binding) {
	if bd.onDevice() {
		b.devices.added(bd.dev)
	}
	b.bound[ip] = bd
}

// update records bd, bound already, as it is now (missing or restored).
func (b *binder) update(bd binding) { b.bound[bd.prefix.Addr()] = bd }

// release forgets ip's binding, and its device's count.
func (b *binder) release(ip netip.Addr) {
	bd, ok := b.bound[ip]
	if !ok {
		return
	}
	delete(b.bound, ip)
	if bd.onDevice() {
		b.devices.removed(bd.dev)
	}
}

// removedOwn counts a removal of ip's address by this node, whose event
// has not come back yet.
func (b *binder) removedOwn(ip netip.Addr) { b.ownRemovals[ip]++ }

// ownRemoval says whether an address event of ip's removal is one of this
// node's own (removedOwn), and counts it back.
func (b *binder) ownRemoval(ip netip.Addr) bool {
	if b.ownRemovals[ip] == 0 {
		return false
	}
	if b.ownRemovals[ip]--; b.ownRemovals[ip] == 0 {
		delete(b.ownRemovals, ip)
	}
	return true
}

// addressesChanged forgets the interfaces "auto" resolved to: an address
// that is not a managed IP changed, and the node's own addresses define
// the subnets.
func (b *binder) addressesChanged() { clear(b.autoIface) }

// linkChanged forgets what a change of a link may change: the interfaces
// "auto" resolved to, and this node's MACs.
func (b *binder) linkChanged() {
	clear(b.autoIface)
	b.macs = ""
}

// wentDown records that iface lost its carrier, and says whether it had
// it.
func (b *binder) wentDown(iface string) bool {
	if b.linkDown[iface] {
		return false
	}
	b.linkDown[iface] = true
	return true
}

// cameUp records that iface has its carrier, and says whether it had lost
// it.
func (b *binder) cameUp(iface string) bool {
	if !b.linkDown[iface] {
		return false
	}
	delete(b.linkDown, iface)
	return true
}

// rerouted records the route now announced for bound ip.
func (b *binder) rerouted(ip netip.Addr, r bgp.Route) {
	bd := b.bound[ip]
	bd.route = r
	b.bound[ip] = bd
}

// watchClaimsOn watches the announcements on iface for claims of the
// addresses this node binds or probes, once.
func (b *binder) watchClaimsOn(iface string) {
	if _, ok := b.claimWatch[iface]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.claimWatch[iface] = cancel
	backlog := new(netif.Backlog)
	b.backlogs = append(b.backlogs, backlog)
	// The watch reads nothing of b: the loop's goroutine owns it.
	watch, has, claims, log := b.watchClaims, b.claimed.has, b.claims, b.log
	go func() {
		if err := watch(ctx, iface, has, claims, backlog); err != nil && ctx.Err() == nil {
			log.Error("watching announcements failed", "iface", iface, "err", err)
		}
	}()
}

// unheard says whether claims may wait that the loop has not read: in its
// queue, or in a watch that fell behind. Silence is no answer until none
// do: a frame received before now may still be on its way.
func (b *binder) unheard() bool {
	if len(b.claims) > 0 {
		return true
	}
	for _, bl := range b.backlogs {
		if bl.Unread() {
			return true
		}
	}
	return false
}

// ownMACs is lease.FormatMACs of this node's interfaces, listed again
// after a link changed.
func (b *binder) ownMACs() string {
	if b.macs != "" {
		return b.macs
	}
	macs, err := b.links.MACs()
	if err != nil {
		b.log.Warn("list the interfaces' MAC addresses", "err", err)
		return ""
	}
	b.macs = lease.FormatMACs(macs)
	return b.macs
}

// placeOnDevice says whether an address lives on eipd's own device, which
// dies with the process and needs no lifetime, rather than on the
// interface it is announced on, with a lifetime the keeper refreshes:
//   - an address announced over BGP alone: on the device; traffic routed
//     to the node reaches a local address on any device;
//   - an IPv4 host address (/32) announced with ARP: on the device while
//     the kernel answers ARP on the interface for another device's
//     addresses (arp_ignore 0, the default; kube-proxy's IPVS strictARP
//     sets 1), else on the interface;
//   - IPv6: on the interface, since the kernel answers a neighbour
//     solicitation only for an address of the interface it arrived on;
//   - a shorter netmask: on the interface, whose connected subnet it is.
func placeOnDevice(p netip.Prefix, a config.Announce, arpAnswered bool) bool {
	if !a.ARP() {
		return true
	}
	return p.Addr().Is4() && p.IsSingleIP() && arpAnswered
}

// onDevice: the address is on one of eipd's devices, not on its interface.
func (b binding) onDevice() bool { return b.dev != b.iface }

// resyncIfaces are the interfaces a resync lists, each with the bindings
// on it: those bound on, and those of the IPs d manages.
func (b *binder) resyncIfaces(d *desired) map[string]int {
	ifaces := map[string]int{} // to list, with the bindings on each
	for _, bd := range b.bound {
		ifaces[bd.dev]++
	}
	// Resolving "auto" for an IP not resolved before lists every address
	// of the node; one IP per range finds that range's interface.
	resolved := map[*config.Range]bool{}
	for _, m := range d.order {
		ip := m.ip
		on := d.entries[ip].Binding
		if _, cached := b.autoIface[ip]; !cached && (on.Iface == "" || on.Iface == "auto") {
			if resolved[on.Range] {
				continue
			}
			resolved[on.Range] = true
		}
		if iface, err := b.ifaceFor(ip, on); err == nil {
			if _, listed := ifaces[iface]; !listed {
				ifaces[iface] = 0
			}
		}
	}
	return ifaces
}

// restoreDevice answers ev if it is about one of eipd's own devices
// (ours): one that went down or away, by hand, is brought back, and the
// addresses it lost are bound again. Each is counted as vanished by its
// own removal event, which the kernel sends before or after the link's
// (addrEvent).
func (b *binder) restoreDevice(ev netif.LinkEvent) (ours bool) {
	if !b.devs.Owns(ev.Iface) {
		return false
	}
	if ev.Up {
		return true
	}
	again, err := b.devs.Ensure(ev.Iface)
	if err != nil {
		b.log.Error("restore eipd's address device", "iface", ev.Iface, "err", err)
		return true
	}
	if !again {
		return true
	}
	n := 0
	for ip, bd := range b.bound {
		if bd.dev != ev.Iface {
			continue
		}
		if err := b.addresser.Add(bd.dev, bd.prefix, 0); err != nil {
			b.log.Error("restore address", "ip", ip, "iface", bd.dev, "err", err)
			continue
		}
		bd.missing = false
		b.update(bd)
		n++
	}
	b.log.Info("restored eipd's address device and its addresses", "iface", ev.Iface, "addresses", n)
	return true
}
