package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eip-project/eip/testenv"
)

// HTTPEvery is the client's request interval per IP (50 requests/s); each
// request opens a new connection, so each one goes through ARP, the holder
// node and kube-proxy to a pod.
const (
	HTTPEvery   = 20 * time.Millisecond
	httpTimeout = time.Second
)

// Request is one HTTP request of the client.
type Request struct {
	Start, End time.Time
	Answer     string // "pod=… node=…", empty on failure
	// Remote is the address the pod saw the request come from; empty on
	// failure.
	Remote string
	Err    error
}

// Traffic is what the client sends to one IP: 10 ms pings and HTTP.
type Traffic struct {
	ip    netip.Addr
	probe *testenv.Probe
	stop  chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	reqs []Request
}

// StartTraffic starts pinging ip every 10 ms and requesting
// http://ip/ every HTTPEvery from the client namespace, until Finish.
func StartTraffic(c *testenv.Cluster, ip netip.Addr) (*Traffic, error) {
	p, err := c.Probe(ip, 0)
	if err != nil {
		return nil, err
	}
	tr := &Traffic{ip: ip, probe: p, stop: make(chan struct{})}
	base, ok := c.ClientHTTP().Transport.(*http.Transport)
	if !ok {
		p.Stop()
		return nil, errors.New("client HTTP transport is not an *http.Transport")
	}
	transport := base.Clone()
	transport.DisableKeepAlives = true
	hc := &http.Client{Transport: transport, Timeout: httpTimeout}
	url := "http://" + ip.String() + "/"
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(HTTPEvery)
		defer tick.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
			tr.wg.Add(1)
			go func() {
				defer tr.wg.Done()
				tr.record(get(hc, url))
			}()
		}
	}()
	return tr, nil
}

func get(hc *http.Client, url string) Request {
	r := Request{Start: time.Now()}
	resp, err := hc.Get(url)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
		r.Answer, r.Remote, _ = strings.Cut(strings.TrimSpace(string(b)), " remote=")
	}
	r.End, r.Err = time.Now(), err
	if err != nil {
		r.Answer, r.Remote = "", ""
	}
	return r
}

func (tr *Traffic) record(r Request) {
	tr.mu.Lock()
	tr.reqs = append(tr.reqs, r)
	tr.mu.Unlock()
}

// Finish stops the traffic and returns what the client saw. It may be
// called again and returns nothing new then.
func (tr *Traffic) Finish() Seen {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return Seen{IP: tr.ip, Pings: tr.probe.Stop(), Requests: append([]Request(nil), tr.reqs...)}
}

// WaitAnswering waits until the IP answers HTTP requests, so measuring
// starts from a working state.
func (tr *Traffic) WaitAnswering(ctx context.Context) error { return tr.WaitAnswered(ctx, 5) }

// WaitAnswered waits until n requests sent from now on were answered.
func (tr *Traffic) WaitAnswered(ctx context.Context, n int) error {
	since := time.Now()
	for {
		tr.mu.Lock()
		ok := 0
		for _, r := range tr.reqs {
			if r.Start.After(since) && r.Err == nil {
				ok++
			}
		}
		tr.mu.Unlock()
		if ok >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer HTTP: %w", tr.ip, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Seen is what the client saw of one IP.
type Seen struct {
	IP       netip.Addr
	Pings    testenv.ProbeResult
	Requests []Request
}

// Failed lists the HTTP requests that failed.
func (s Seen) Failed() []Request {
	var f []Request
	for _, r := range s.Requests {
		if r.Err != nil {
			f = append(f, r)
		}
	}
	return f
}

// Pods lists the pods that answered ("pod=… node=…"), with their answer
// counts.
func (s Seen) Pods() map[string]int {
	m := map[string]int{}
	for _, r := range s.Requests {
		if r.Err == nil {
			m[r.Answer]++
		}
	}
	return m
}

func (s Seen) String() string {
	g := s.Pings.LongestGap()
	var moves []string
	for _, r := range Runs(s.Pings) {
		moves = append(moves, fmt.Sprintf("%s×%d", r.MAC[len(r.MAC)-2:], r.Replies))
	}
	return fmt.Sprintf("%s: pings %d sent %d lost, longest gap %s, answered by MAC …%s; HTTP %d requests, %d failed, answered by %d pods",
		s.IP, s.Pings.Sent, s.Pings.Lost(), g.Duration().Round(time.Millisecond), strings.Join(moves, " → …"), len(s.Requests), len(s.Failed()), len(s.Pods()))
}

// Run is a stretch of replies, in sequence order, all from one MAC.
type Run struct {
	MAC         string
	First, Last testenv.Reply
	Replies     int
}

// Runs splits the replies, in sequence order, into runs of one MAC. Each
// change of run is the IP moving to another node (or two nodes answering).
func Runs(r testenv.ProbeResult) []Run {
	replies := slices.Clone(r.Replies)
	slices.SortStableFunc(replies, func(a, b testenv.Reply) int { return a.Seq - b.Seq })
	var rs []Run
	for _, rep := range replies {
		if n := len(rs); n > 0 && rs[n-1].MAC == rep.MAC.String() {
			rs[n-1].Last = rep
			rs[n-1].Replies++
			continue
		}
		rs = append(rs, Run{MAC: rep.MAC.String(), First: rep, Last: rep, Replies: 1})
	}
	return rs
}

// MinRun is the shortest time an IP may stay on a node between two moves
// before it counts as two nodes answering in turn: a rollout moves an IP at
// most once per pod restart, seconds apart.
const MinRun = 500 * time.Millisecond

// TwoMACs lists the moments two MACs answered for the IP: one request
// answered by two MACs, or answers flipping to another MAC and back within
// MinRun.
func TwoMACs(r testenv.ProbeResult) []string {
	var found []string
	bySeq := map[int]string{}
	for _, rep := range r.Replies {
		if m, ok := bySeq[rep.Seq]; ok && m != rep.MAC.String() {
			found = append(found, fmt.Sprintf("seq %d answered by %s and %s", rep.Seq, m, rep.MAC))
		}
		bySeq[rep.Seq] = rep.MAC.String()
	}
	rs := Runs(r)
	for i := 1; i+1 < len(rs); i++ {
		if rs[i-1].MAC == rs[i+1].MAC && rs[i].Last.At.Sub(rs[i].First.At) < MinRun {
			found = append(found, fmt.Sprintf("%s answered seq %d–%d between answers of %s", rs[i].MAC, rs[i].First.Seq, rs[i].Last.Seq, rs[i-1].MAC))
		}
	}
	return found
}

// MoveWindows are the spans in which the IP was moving: from the last reply
// of one MAC to the first of the next, and the longest gap.
func MoveWindows(r testenv.ProbeResult) []testenv.Gap {
	var ws []testenv.Gap
	rs := Runs(r)
	for i := 1; i < len(rs); i++ {
		ws = append(ws, testenv.Gap{From: rs[i-1].Last.At, To: rs[i].First.At})
	}
	return append(ws, r.LongestGap())
}

// FailedOutsideMoves lists the failed HTTP requests that were not in flight
// within slack of a move window: a connection in flight when the client's
// ARP entry switches nodes is reset, as the new node has no
// connection-tracking state for it, but nothing else may fail.
func (s Seen) FailedOutsideMoves(slack time.Duration) []Request {
	var out []Request
	for _, r := range s.Failed() {
		explained := false
		for _, w := range MoveWindows(s.Pings) {
			if !r.End.Before(w.From.Add(-slack)) && !r.Start.After(w.To.Add(slack)) {
				explained = true
			}
		}
		if !explained {
			out = append(out, r)
		}
	}
	return out
}

// ResetBySwitch reports whether r was reset while in flight across a
// switch of the IP from one MAC to another (from before the last reply of
// one to after the first of the next). The new node has no
// connection-tracking state for a connection the old one accepted, so its
// kube-proxy sends the connection's next packet to its own pod, which
// resets it.
func (s Seen) ResetBySwitch(r Request) bool {
	if !errors.Is(r.Err, syscall.ECONNRESET) {
		return false
	}
	runs := Runs(s.Pings)
	for i := 1; i < len(runs); i++ {
		if r.Start.Before(runs[i].First.At) && r.End.After(runs[i-1].Last.At) {
			return true
		}
	}
	return false
}
