package realnodes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eip-project/eip/testenv"
)

// httpEvery is the client's request interval per IP (50 requests/s); each
// request opens a new connection, so each one goes through ARP, the holder
// node and kube-proxy to a pod.
const (
	httpEvery   = 20 * time.Millisecond
	httpTimeout = time.Second
	// maxGap is the longest interruption an IP may show during a planned
	// move (rollout, pod deletion, drain): the project's contract.
	maxGap = 100 * time.Millisecond
)

// request is one HTTP request of the client.
type request struct {
	start, end time.Time
	answer     string // "pod=… node=…", empty on failure
	err        error
}

// traffic is what the client sends to one IP: 10 ms pings and HTTP.
type traffic struct {
	ip    netip.Addr
	probe *testenv.Probe
	stop  chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	reqs []request
}

func startTraffic(t *testing.T, ip netip.Addr) *traffic {
	t.Helper()
	p, err := cluster.Probe(ip, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr := &traffic{ip: ip, probe: p, stop: make(chan struct{})}
	base, ok := cluster.ClientHTTP().Transport.(*http.Transport)
	if !ok {
		t.Fatal("client HTTP transport is not an *http.Transport")
	}
	transport := base.Clone()
	transport.DisableKeepAlives = true
	hc := &http.Client{Transport: transport, Timeout: httpTimeout}
	url := "http://" + ip.String() + "/"
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(httpEvery)
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
	t.Cleanup(func() { tr.finish() })
	return tr
}

func get(hc *http.Client, url string) request {
	r := request{start: time.Now()}
	resp, err := hc.Get(url)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
		r.answer = strings.TrimSpace(string(b))
	}
	r.end, r.err = time.Now(), err
	if err != nil {
		r.answer = ""
	}
	return r
}

func (tr *traffic) record(r request) {
	tr.mu.Lock()
	tr.reqs = append(tr.reqs, r)
	tr.mu.Unlock()
}

// finish stops the traffic and returns what the client saw.
func (tr *traffic) finish() seen {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return seen{ip: tr.ip, pings: tr.probe.Stop(), reqs: append([]request(nil), tr.reqs...)}
}

// waitAnswering waits until the IP answers HTTP requests, so measuring
// starts from a working state.
func (tr *traffic) waitAnswering(ctx context.Context) error {
	since := time.Now()
	for {
		tr.mu.Lock()
		ok := 0
		for _, r := range tr.reqs {
			if r.start.After(since) && r.err == nil {
				ok++
			}
		}
		tr.mu.Unlock()
		if ok >= 5 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer HTTP: %w", tr.ip, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// seen is what the client saw of one IP.
type seen struct {
	ip    netip.Addr
	pings testenv.ProbeResult
	reqs  []request
}

func (s seen) failed() []request {
	var f []request
	for _, r := range s.reqs {
		if r.err != nil {
			f = append(f, r)
		}
	}
	return f
}

// pods lists the pods that answered, with their answer counts.
func (s seen) pods() map[string]int {
	m := map[string]int{}
	for _, r := range s.reqs {
		if r.err == nil {
			m[r.answer]++
		}
	}
	return m
}

func (s seen) String() string {
	g := s.pings.LongestGap()
	var moves []string
	for _, r := range runs(s.pings) {
		moves = append(moves, fmt.Sprintf("%s×%d", r.mac[len(r.mac)-2:], r.replyCount))
	}
	return fmt.Sprintf("%s: pings %d sent %d lost, longest gap %s, answered by MAC …%s; HTTP %d requests, %d failed, answered by %d pods",
		s.ip, s.pings.Sent, s.pings.Lost(), g.Duration().Round(time.Millisecond), strings.Join(moves, " → …"), len(s.reqs), len(s.failed()), len(s.pods()))
}

// macRun is a stretch of replies, in sequence order, all from one MAC.
type macRun struct {
	mac        string
	first      testenv.Reply
	last       testenv.Reply
	replyCount int
}

// runs splits the replies, in sequence order, into runs of one MAC. Each
// change of run is the IP moving to another node (or two nodes answering).
func runs(r testenv.ProbeResult) []macRun {
	replies := slices.Clone(r.Replies)
	slices.SortStableFunc(replies, func(a, b testenv.Reply) int { return a.Seq - b.Seq })
	var rs []macRun
	for _, rep := range replies {
		if n := len(rs); n > 0 && rs[n-1].mac == rep.MAC.String() {
			rs[n-1].last = rep
			rs[n-1].replyCount++
			continue
		}
		rs = append(rs, macRun{mac: rep.MAC.String(), first: rep, last: rep, replyCount: 1})
	}
	return rs
}

// minRun is the shortest time an IP may stay on a node between two moves
// before it counts as two nodes answering in turn: a rollout moves an IP at
// most once per pod restart, seconds apart.
const minRun = 500 * time.Millisecond

// twoMACs lists the moments two MACs answered for the IP: one request
// answered by two MACs, or answers flipping to another MAC and back within
// minRun.
func twoMACs(r testenv.ProbeResult) []string {
	var found []string
	bySeq := map[int]string{}
	for _, rep := range r.Replies {
		if m, ok := bySeq[rep.Seq]; ok && m != rep.MAC.String() {
			found = append(found, fmt.Sprintf("seq %d answered by %s and %s", rep.Seq, m, rep.MAC))
		}
		bySeq[rep.Seq] = rep.MAC.String()
	}
	rs := runs(r)
	for i := 1; i+1 < len(rs); i++ {
		if rs[i-1].mac == rs[i+1].mac && rs[i].last.At.Sub(rs[i].first.At) < minRun {
			found = append(found, fmt.Sprintf("%s answered seq %d–%d between answers of %s", rs[i].mac, rs[i].first.Seq, rs[i].last.Seq, rs[i-1].mac))
		}
	}
	return found
}

// moveWindows are the spans in which the IP was moving: from the last reply
// of one MAC to the first of the next, and every gap longer than maxGap.
func moveWindows(r testenv.ProbeResult) []testenv.Gap {
	var ws []testenv.Gap
	rs := runs(r)
	for i := 1; i < len(rs); i++ {
		ws = append(ws, testenv.Gap{From: rs[i-1].last.At, To: rs[i].first.At})
	}
	return append(ws, r.LongestGap())
}

// planned checks a planned move of the IP: the longest ping gap is at most
// maxGap, two MACs never answered, and no HTTP request failed except while
// the IP moved (within maxGap of a move window: a connection in flight when
// the client's ARP entry switches nodes is reset, as the new node has no
// connection-tracking state for it).
func (s seen) planned(t *testing.T) {
	t.Helper()
	t.Log(s)
	for _, m := range twoMACs(s.pings) {
		t.Errorf("%s: two MACs answered: %s", s.ip, m)
	}
	g := s.pings.LongestGap()
	if g.Duration() > maxGap {
		t.Errorf("%s: longest gap %s (%s – %s), more than %s", s.ip, g.Duration(), g.From.Format(time.StampMilli), g.To.Format(time.StampMilli), maxGap)
	}
	for _, r := range s.failed() {
		explained := false
		for _, w := range moveWindows(s.pings) {
			if !r.end.Before(w.From.Add(-maxGap)) && !r.start.After(w.To.Add(maxGap)) {
				explained = true
			}
		}
		if !explained {
			t.Errorf("%s: HTTP request at %s failed while the IP was not moving: %v", s.ip, r.start.Format(time.StampMilli), r.err)
		}
	}
	if len(s.reqs) == 0 {
		t.Errorf("%s: no HTTP requests completed", s.ip)
	}
}
