package bench

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/eip-project/eip/testenv"
)

// addrWatch records, from netlink address events in every node namespace,
// when each watched IP appeared on and vanished from each node. Unlike
// the client's pings it sees an address that nobody is sending to, such as
// a killed daemon's address before its lifetime ends.
type addrWatch struct {
	watch func(netip.Addr) bool
	done  chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	bound  map[string]map[netip.Addr]time.Time // node → ip → since when
	spans  map[netip.Addr][]boundSpan          // closed spans
	errors []error
}

// boundSpan is a time an IP was bound on a node.
type boundSpan struct {
	Node     string
	From, To time.Time
}

func watchAddrs(nodes []testenv.Node, watch func(netip.Addr) bool) (*addrWatch, error) {
	w := &addrWatch{watch: watch, done: make(chan struct{}), bound: map[string]map[netip.Addr]time.Time{}, spans: map[netip.Addr][]boundSpan{}}
	for _, n := range nodes {
		ns, err := netns.GetFromName(n.Netns)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("watch addresses of %s: %w", n.Name, err)
		}
		ch := make(chan netlink.AddrUpdate, 4096)
		err = netlink.AddrSubscribeWithOptions(ch, w.done, netlink.AddrSubscribeOptions{
			Namespace:         &ns,
			ListExisting:      true,
			ReceiveBufferSize: 4 << 20,
			ErrorCallback:     func(err error) { w.fail(fmt.Errorf("watch addresses of %s: %w", n.Name, err)) },
		})
		ns.Close()
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("watch addresses of %s: %w", n.Name, err)
		}
		// Under the lock: the readers of the nodes before this one run.
		w.mu.Lock()
		w.bound[n.Name] = map[netip.Addr]time.Time{}
		w.mu.Unlock()
		w.wg.Add(1)
		go w.read(n.Name, ch)
	}
	return w, nil
}

func (w *addrWatch) fail(err error) {
	select {
	case <-w.done:
		return // closing ends the subscription with an error
	default:
	}
	w.mu.Lock()
	w.errors = append(w.errors, err)
	w.mu.Unlock()
}

func (w *addrWatch) read(node string, ch <-chan netlink.AddrUpdate) {
	defer w.wg.Done()
	for u := range ch {
		at := time.Now()
		ip, ok := netip.AddrFromSlice(u.LinkAddress.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if !w.watch(ip) {
			continue
		}
		w.mu.Lock()
		since, isBound := w.bound[node][ip]
		switch {
		case u.NewAddr && !isBound:
			w.bound[node][ip] = at
		case !u.NewAddr && isBound:
			delete(w.bound[node], ip)
			w.spans[ip] = append(w.spans[ip], boundSpan{Node: node, From: since, To: at})
		}
		w.mu.Unlock()
	}
}

// Close ends the subscriptions.
func (w *addrWatch) Close() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
}

// Err reports a subscription that failed: its record is incomplete.
func (w *addrWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errors) == 0 {
		return nil
	}
	return w.errors[0]
}

// Spans lists the spans ip was bound on any node, those still open ending
// at now.
func (w *addrWatch) Spans(ip netip.Addr, now time.Time) []boundSpan {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.spans[ip])
	for node, m := range w.bound {
		if since, ok := m[ip]; ok {
			out = append(out, boundSpan{Node: node, From: since, To: now})
		}
	}
	return out
}

// removal is one time an IP left a node: the span it was bound there,
// and the nodes it was bound on after it left, sorted.
type removal struct {
	IP netip.Addr
	boundSpan
	After []string
}

// Removed lists the times any of ips left a node, earliest first.
func (w *addrWatch) Removed(ips []netip.Addr) []removal {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []removal
	for _, ip := range ips {
		for _, s := range w.spans[ip] {
			r := removal{IP: ip, boundSpan: s}
			for _, t := range w.spans[ip] {
				if !t.From.Before(s.To) {
					r.After = append(r.After, t.Node)
				}
			}
			for node, m := range w.bound {
				if since, ok := m[ip]; ok && !since.Before(s.To) {
					r.After = append(r.After, node)
				}
			}
			slices.Sort(r.After)
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b removal) int { return a.To.Compare(b.To) })
	return out
}

// Counts says how many watched IPs are bound now on any node, and how
// many of them on two or more.
func (w *addrWatch) Counts() (bound, twice int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	on := map[netip.Addr]int{}
	for _, m := range w.bound {
		for ip := range m {
			on[ip]++
		}
	}
	for _, n := range on {
		if n > 1 {
			twice++
		}
	}
	return len(on), twice
}

// BoundOn lists the nodes ip is bound on now.
func (w *addrWatch) BoundOn(ip netip.Addr) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for node, m := range w.bound {
		if _, ok := m[ip]; ok {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// watchResolution is the shortest overlap of two nodes' spans that
// multiBound counts. Each node's events come from a socket of its own and
// are stamped when the benchmark reads them. When the benchmark gets no
// CPU for a while, events of two nodes wait in their sockets and are then
// stamped microseconds apart in either order: one CI run saw a planned move
// (client gap 17 ms) as 29 µs on two nodes. A real overlap is ordered by
// at least the API round trip of the lock write between the two nodes; the
// one found before, a killed holder's address outliving its lease, lasted
// up to 279 ms.
const watchResolution = time.Millisecond

// multiBound is the total time within [from, to] during which spans of
// two or more different nodes overlap, counting only overlaps of at least
// watchResolution.
func multiBound(spans []boundSpan, from, to time.Time) time.Duration {
	type edge struct {
		at   time.Time
		node string
		up   bool
	}
	var edges []edge
	for _, s := range spans {
		a, b := maxTime(s.From, from), minTime(s.To, to)
		if !a.Before(b) {
			continue
		}
		edges = append(edges, edge{a, s.Node, true}, edge{b, s.Node, false})
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		// Ends before starts at the same instant: touching spans do not overlap.
		switch {
		case x.up == y.up:
			return 0
		case !x.up:
			return -1
		}
		return 1
	})
	count := map[string]int{}
	var total time.Duration
	var since time.Time
	for _, e := range edges {
		nodes := len(count)
		if e.up {
			count[e.node]++
		} else if count[e.node]--; count[e.node] == 0 {
			delete(count, e.node)
		}
		switch {
		case nodes < 2 && len(count) >= 2:
			since = e.at
		case nodes >= 2 && len(count) < 2:
			if d := e.at.Sub(since); d >= watchResolution {
				total += d
			}
		}
	}
	return total
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
