package agent

import (
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/netif"
)

// lifetimeChunk is how many addresses one refresh sends while it holds
// the keeper: an unbind waits at most for one chunk, a few milliseconds.
const lifetimeChunk = 256

// keeper renews the kernel lifetimes of the addresses this node has bound
// on a LAN interface (those that cannot live on eipd's device, see
// placeOnDevice), on a goroutine of its own, a chunk of addresses per
// system call: at each tick of the loop, and every renew interval while
// the loop makes progress (the watchdog's record of it).
//
// Like the addresses on eipd's device, these live as long as eipd does,
// however late its loop runs: a peer that takes an IP over probes for it
// first and never binds while an eip node answers (addrConflicts), so an
// address kept here does not answer from two MACs; it only waits, on a
// starved node, until its loop gets round to dropping it. A loop that
// makes no progress for loopHungAfter is hung: the keeper stops, and the
// watchdog ends eipd, so the addresses expire a lifetime later at most.
//
// The kernel has no "update only" request: a refresh binds an address that
// is missing. So an address leaves the keeper (forget) before it is
// removed from the interface, and a chunk in flight finishes first.
type keeper struct {
	log *slog.Logger
	clk clock.WithTicker
	a   Addresser
	// late counts refreshes that came more than one and a half intervals
	// after the one before: the kernel was close to removing addresses.
	late func()
	kick chan struct{}

	// quiet is how long ago the owner loop last made progress, and
	// whether it has made any (watchdog.quiet).
	quiet func(now time.Time) (time.Duration, bool)

	mu     sync.Mutex
	addrs  map[netip.Addr]netif.Bound
	timing keeperTiming
}

// addressExpirySlack is how late this kernel may remove an IPv4 address
// whose lifetime ended: check_lifetime rounds its timer up to a whole
// second when that delays it by at most ADDRCONF_TIMER_FUZZ (HZ/4).
// make bench measured up to 232 ms after a SIGKILL.
const addressExpirySlack = 250 * time.Millisecond

// keeperTiming is what the configuration says about refreshes.
type keeperTiming struct {
	lifetime time.Duration // given to each refreshed address
	interval time.Duration // between refreshes: the renew interval
}

func newKeeper(log *slog.Logger, clk clock.WithTicker, a Addresser, late func(), quiet func(time.Time) (time.Duration, bool)) *keeper {
	return &keeper{log: log, clk: clk, a: a, late: late, quiet: quiet, kick: make(chan struct{}, 1), addrs: map[netip.Addr]netif.Bound{}}
}

// keep adds or replaces an address to refresh.
func (k *keeper) keep(ip netip.Addr, b netif.Bound) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addrs[ip] = b
}

// forget stops refreshing ip; once it returns no refresh of it is in
// flight, so the address may be removed.
func (k *keeper) forget(ip netip.Addr) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.addrs, ip)
}

// configure sets the timing from the configuration in force.
func (k *keeper) configure(c config.Config) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.timing = keeperTiming{
		lifetime: c.AddressLifetime(),
		interval: c.RenewInterval,
	}
}

// loopTicked is called by the owner loop on each tick: the addresses are
// refreshed now.
func (k *keeper) loopTicked() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// run refreshes at each tick of the loop and, while the loop is not hung,
// each interval, until stop is closed.
func (k *keeper) run(stop <-chan struct{}) {
	t := k.clk.NewTimer(k.now().interval)
	defer func() { t.Stop() }()
	var last time.Time
	for {
		ticked := false
		select {
		case <-stop:
			return
		case <-k.kick:
			ticked = true
		case <-t.C():
		}
		tm := k.now()
		now := k.clk.Now()
		quiet, armed := k.quiet(now)
		k.mu.Lock()
		none := len(k.addrs) == 0
		k.mu.Unlock()
		if none {
			// Nothing to refresh (every address on eipd's device): a
			// late refresh of nothing is no warning.
			last = time.Time{}
		} else if ticked || armed && quiet < loopHungAfter {
			if !last.IsZero() && now.Sub(last) > tm.interval+tm.interval/2 {
				k.late()
				k.log.Warn("address lifetimes refreshed late", "since", now.Sub(last), "interval", tm.interval)
			}
			last = now
			k.refresh(tm.lifetime)
		}
		t.Stop()
		t = k.clk.NewTimer(tm.interval)
	}
}

func (k *keeper) now() keeperTiming {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.timing
}

// refresh renews every address, a chunk at a time, each chunk under the
// lock so that forget waits for it; an address forgotten meanwhile is
// skipped.
func (k *keeper) refresh(lifetime time.Duration) {
	k.mu.Lock()
	ips := make([]netip.Addr, 0, len(k.addrs))
	for ip := range k.addrs {
		ips = append(ips, ip)
	}
	k.mu.Unlock()
	slices.SortFunc(ips, netip.Addr.Compare)
	for c := range slices.Chunk(ips, lifetimeChunk) {
		k.refreshChunk(c, lifetime)
	}
}

func (k *keeper) refreshChunk(ips []netip.Addr, lifetime time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	batch := make([]netif.Bound, 0, len(ips))
	for _, ip := range ips {
		if b, ok := k.addrs[ip]; ok {
			batch = append(batch, b)
		}
	}
	if err := k.a.Refresh(batch, lifetime); err != nil {
		k.log.Error("refresh address lifetimes", "err", err)
	}
}
