package netif

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AddrEvent says a global-scope address appeared on or left an interface.
type AddrEvent struct {
	Iface  string
	Prefix netip.Prefix
	Added  bool
}

// LinkEvent says an interface gained or lost the ability to carry traffic:
// Up means administratively up with carrier (see [Addresses.Up]).
type LinkEvent struct {
	Iface string
	Up    bool
}

const (
	// watchBuffer absorbs bursts (a thousand addresses bound at start-up)
	// before the kernel drops notifications and forces a re-subscription.
	watchBuffer       = 4 << 20
	resubscribeMin    = 100 * time.Millisecond
	resubscribeMax    = 5 * time.Second
	watchChannelDepth = 256
)

// Watch streams the addresses and links of the calling thread's network
// namespace until ctx ends, then returns nil. Like an informer, it first
// reports the current state (every global address as added, every link's
// state), taken after subscribing so nothing falls between, then changes:
// an address when it appears or goes away (not on each lifetime refresh), a
// link when its up state changes, or it is renamed (old name reported down)
// or deleted (reported down if it was up). When the kernel drops
// notifications, Watch re-subscribes and reports what changed meanwhile from
// a fresh listing. Either channel may be nil to skip that kind of event.
// Sends wait for the receiver or ctx. An error is returned only if the first
// subscription fails.
func Watch(ctx context.Context, log *slog.Logger, addrs chan<- AddrEvent, links chan<- LinkEvent) error {
	ns, err := currentNetNamespace()
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer func() { _ = ns.close() }()
	h, err := newNetlinkHandle(ns)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer h.Close()

	w := &watcher{
		log: log, ns: ns, nl: h, addrOut: addrs, linkOut: links,
		links: map[int]linkState{}, addrs: map[addrKey]string{},
	}
	backoff := resubscribeMin
	for {
		err := w.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !w.subscribed {
			return fmt.Errorf("watch: %w", err)
		}
		log.Warn("netlink watch interrupted, re-subscribing", "err", err, "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if w.streamed {
			backoff = resubscribeMin
		} else {
			backoff = min(2*backoff, resubscribeMax)
		}
	}
}

type watcher struct {
	log     *slog.Logger
	ns      netNamespace
	nl      *netlink.Handle
	addrOut chan<- AddrEvent
	linkOut chan<- LinkEvent

	// Last reported state.
	links map[int]linkState
	addrs map[addrKey]string // value: interface name when it appeared
	// subscribed says some session got as far as streaming; streamed says
	// the last one did.
	subscribed, streamed bool
}

type linkState struct {
	name string
	up   bool
}

type addrKey struct {
	link   int
	prefix netip.Prefix
}

// session subscribes, reconciles the last known state with a fresh listing,
// and streams until the subscription breaks or ctx ends.
func (w *watcher) session(ctx context.Context) error {
	w.streamed = false
	done := make(chan struct{})
	var open []func()
	defer func() {
		close(done)
		for _, drain := range open {
			drain()
		}
	}()
	// Called from netlink's receive goroutines, so it must not block; the
	// last error explains a closed subscription.
	lastErr := make(chan error, 1)
	onErr := func(err error) {
		w.log.Debug("netlink subscription error", "err", err)
		select {
		case <-lastErr:
		default:
		}
		select {
		case lastErr <- err:
		default:
		}
	}
	closed := func(what string) error {
		select {
		case err := <-lastErr:
			return fmt.Errorf("%s subscription closed: %w", what, err)
		default:
			return fmt.Errorf("%s subscription closed", what)
		}
	}

	// Subscribing on a thread already in the namespace, with no Namespace
	// option: given one, netlink calls setns(2), which needs CAP_SYS_ADMIN
	// (see newNetlinkHandle).
	linkCh := make(chan netlink.LinkUpdate, watchChannelDepth)
	err := w.ns.do(func() error {
		return netlink.LinkSubscribeWithOptions(linkCh, done, netlink.LinkSubscribeOptions{
			ErrorCallback: onErr, ReceiveBufferSize: watchBuffer,
		})
	})
	if err != nil {
		return fmt.Errorf("subscribe to links: %w", err)
	}
	open = append(open, func() { drainClosed(linkCh) })

	var addrCh chan netlink.AddrUpdate // nil, never ready, when not watching addresses
	if w.addrOut != nil {
		addrCh = make(chan netlink.AddrUpdate, watchChannelDepth)
		err = w.ns.do(func() error {
			return netlink.AddrSubscribeWithOptions(addrCh, done, netlink.AddrSubscribeOptions{
				ErrorCallback: onErr, ReceiveBufferSize: watchBuffer,
			})
		})
		if err != nil {
			return fmt.Errorf("subscribe to addresses: %w", err)
		}
		open = append(open, func() { drainClosed(addrCh) })
	}

	links, addrs, err := w.snapshot()
	if err != nil {
		return err
	}
	for _, ev := range diffLinks(w.links, links) {
		if !w.sendLink(ctx, ev) {
			return nil
		}
	}
	for _, ev := range diffAddrs(w.addrs, addrs) {
		if !w.sendAddr(ctx, ev) {
			return nil
		}
	}
	w.links, w.addrs = links, addrs
	w.subscribed, w.streamed = true, true

	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-linkCh:
			if !ok {
				return closed("link")
			}
			attrs := u.Attrs()
			for _, ev := range applyLink(w.links, u.Header.Type == unix.RTM_DELLINK, attrs) {
				if !w.sendLink(ctx, ev) {
					return nil
				}
			}
			renameAddrs(w.addrs, attrs.Index, attrs.Name)
		case u, ok := <-addrCh:
			if !ok {
				return closed("address")
			}
			if ev, ok := w.applyAddr(u); ok && !w.sendAddr(ctx, ev) {
				return nil
			}
		}
	}
}

// snapshot lists links and global addresses.
func (w *watcher) snapshot() (map[int]linkState, map[addrKey]string, error) {
	ll, err := dump(w.nl.LinkList)
	if err != nil {
		return nil, nil, fmt.Errorf("list links: %w", err)
	}
	links := make(map[int]linkState, len(ll))
	for _, l := range ll {
		links[l.Attrs().Index] = linkState{name: l.Attrs().Name, up: linkUp(l.Attrs())}
	}
	addrs := map[addrKey]string{}
	if w.addrOut == nil {
		return links, addrs, nil
	}
	al, err := listAddrs(w.nl, nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, err
	}
	for _, ad := range al {
		if ia, ok := toIfAddr(ad); ok && ia.global {
			addrs[addrKey{link: ia.link, prefix: ia.prefix}] = links[ia.link].name
		}
	}
	return links, addrs, nil
}

// applyAddr folds one notification into the known addresses and returns the
// event to report, if any.
func (w *watcher) applyAddr(u netlink.AddrUpdate) (AddrEvent, bool) {
	ia, ok := toIfAddr(netlink.Addr{IPNet: &u.LinkAddress, Scope: u.Scope, LinkIndex: u.LinkIndex})
	if !ok || !ia.global {
		return AddrEvent{}, false
	}
	key := addrKey{link: ia.link, prefix: ia.prefix}
	name, known := w.addrs[key]
	switch {
	case u.NewAddr && !known:
		name = w.linkName(ia.link)
		if name == "" {
			return AddrEvent{}, false
		}
		w.addrs[key] = name
		return AddrEvent{Iface: name, Prefix: ia.prefix, Added: true}, true
	case !u.NewAddr && known:
		delete(w.addrs, key)
		return AddrEvent{Iface: name, Prefix: ia.prefix}, true
	}
	return AddrEvent{}, false
}

// linkName resolves an index for an address on a link whose own
// notification has not arrived yet (the two come on separate sockets).
func (w *watcher) linkName(index int) string {
	if ls, ok := w.links[index]; ok {
		return ls.name
	}
	l, err := w.nl.LinkByIndex(index)
	if err != nil {
		w.log.Debug("address on unknown link", "link", index, "err", err)
		return ""
	}
	return l.Attrs().Name
}

func (w *watcher) sendLink(ctx context.Context, ev LinkEvent) bool {
	if w.linkOut == nil {
		return true
	}
	select {
	case w.linkOut <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *watcher) sendAddr(ctx context.Context, ev AddrEvent) bool {
	select {
	case w.addrOut <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// applyLink folds one link notification into known and returns the events
// it causes: a rename reports the old name down and the new one as it is.
func applyLink(known map[int]linkState, deleted bool, attrs *netlink.LinkAttrs) []LinkEvent {
	prev, ok := known[attrs.Index]
	if deleted {
		delete(known, attrs.Index)
		if ok && prev.up {
			return []LinkEvent{{Iface: prev.name, Up: false}}
		}
		return nil
	}
	cur := linkState{name: attrs.Name, up: linkUp(attrs)}
	known[attrs.Index] = cur
	var evs []LinkEvent
	if ok && prev.name != cur.name && prev.up {
		evs = append(evs, LinkEvent{Iface: prev.name, Up: false})
	}
	if !ok || prev != cur {
		evs = append(evs, LinkEvent{Iface: cur.name, Up: cur.up})
	}
	return evs
}

// renameAddrs keeps the interface names of known addresses current, so that
// their removal is reported under the name the link has then.
func renameAddrs(addrs map[addrKey]string, link int, name string) {
	for k, n := range addrs {
		if k.link == link && n != name {
			addrs[k] = name
		}
	}
}

// diffLinks reports what changed between two listings.
func diffLinks(before, after map[int]linkState) []LinkEvent {
	var evs []LinkEvent
	for i, b := range before {
		if a, ok := after[i]; (!ok || a.name != b.name) && b.up {
			evs = append(evs, LinkEvent{Iface: b.name, Up: false})
		}
	}
	for i, a := range after {
		if b, ok := before[i]; !ok || a != b {
			evs = append(evs, LinkEvent{Iface: a.name, Up: a.up})
		}
	}
	return evs
}

// diffAddrs reports what changed between two listings.
func diffAddrs(before, after map[addrKey]string) []AddrEvent {
	var evs []AddrEvent
	for k, name := range before {
		if _, ok := after[k]; !ok {
			evs = append(evs, AddrEvent{Iface: name, Prefix: k.prefix})
		}
	}
	for k, name := range after {
		if _, ok := before[k]; !ok {
			evs = append(evs, AddrEvent{Iface: name, Prefix: k.prefix, Added: true})
		}
	}
	return evs
}

// drainClosed empties a subscription channel until netlink's receive
// goroutine closes it, so that goroutine never blocks on a send forever.
func drainClosed[T any](ch <-chan T) {
	for range ch {
	}
}
