package agent

import (
	"container/heap"
	"net/netip"
	"time"
)

// ipWakes is each IP's own decision time (a probe's answer, a bind, a
// rank's turn) and the earliest of them. In a mass failover thousands of
// IPs wait on their probes and binds while the loop passes every quarter
// renew interval (sliceOver), and a pass that read every waiting IP to
// find the few whose time came cost a quarter of the loop's CPU. So the
// times are also kept in a min-heap. The map is the truth: a heap entry
// whose IP was decided since, or woken earlier, is stale and skipped.
type ipWakes struct {
	at map[netip.Addr]time.Time
	// min is the earliest time at the last due, or earlier: a decision
	// that forgets an IP leaves it, and the pass it brings finds nothing.
	min  time.Time
	heap wakeHeap
}

func newIPWakes() ipWakes {
	return ipWakes{at: map[netip.Addr]time.Time{}}
}

// set asks for ip to be decided at t, or earlier if it already is.
func (w *ipWakes) set(ip netip.Addr, t time.Time) {
	if cur, ok := w.at[ip]; !ok || t.Before(cur) {
		w.at[ip] = t
		heap.Push(&w.heap, ipWake{t, ip})
		if len(w.heap) > 2*len(w.at)+shrinkBelow {
			w.rebuild()
		}
	}
	if w.min.IsZero() || t.Before(w.min) {
		w.min = t
	}
}

// forget drops ip's time: it was decided.
func (w *ipWakes) forget(ip netip.Addr) {
	delete(w.at, ip)
}

// due hands each IP whose time is not after now to f, forgets it, and
// sets min to the earliest time left.
func (w *ipWakes) due(now time.Time, f func(netip.Addr)) {
	for len(w.heap) > 0 {
		top := w.heap[0]
		if at, ok := w.at[top.ip]; !ok || !at.Equal(top.at) {
			heap.Pop(&w.heap)
			continue
		}
		if now.Before(top.at) {
			w.min = top.at
			return
		}
		heap.Pop(&w.heap)
		delete(w.at, top.ip)
		f(top.ip)
	}
	w.min = time.Time{}
}

// reset forgets every time, and the room the heap and the map grew to.
func (w *ipWakes) reset() {
	*w = newIPWakes()
}

// rebuild makes the heap again of the map's times alone.
func (w *ipWakes) rebuild() {
	w.heap = make(wakeHeap, 0, len(w.at))
	for ip, at := range w.at {
		w.heap = append(w.heap, ipWake{at, ip})
	}
	heap.Init(&w.heap)
}

type ipWake struct {
	at time.Time
	ip netip.Addr
}

// wakeHeap orders IP wakes by time, then address.
type wakeHeap []ipWake

func (h wakeHeap) Len() int { return len(h) }
func (h wakeHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].ip.Less(h[j].ip)
}
func (h wakeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)   { *h = append(*h, x.(ipWake)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
