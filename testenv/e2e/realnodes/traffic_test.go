package realnodes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
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
	return fmt.Sprintf("%s: pings %d sent %d lost, longest gap %s, MACs %v; HTTP %d requests, %d failed, answered by %d pods",
		s.ip, s.pings.Sent, s.pings.Lost(), g.Duration().Round(time.Millisecond), s.pings.MACs(), len(s.reqs), len(s.failed()), len(s.pods()))
}

// planned checks a planned move of the IP: the longest ping gap is at most
// maxGap, two MACs never answered, and every failed HTTP request started
// within that gap (widened by one request interval each side: a request
// started just before the gap may have lost its SYN in it).
func (s seen) planned(t *testing.T) {
	t.Helper()
	t.Log(s)
	if ov := s.pings.Overlaps(); len(ov) > 0 {
		t.Errorf("%s: two MACs answered: %v", s.ip, ov)
	}
	g := s.pings.LongestGap()
	if g.Duration() > maxGap {
		t.Errorf("%s: longest gap %s (%s – %s), more than %s", s.ip, g.Duration(), g.From.Format(time.StampMilli), g.To.Format(time.StampMilli), maxGap)
	}
	from, to := g.From.Add(-httpEvery), g.To.Add(httpEvery)
	for _, r := range s.failed() {
		if r.start.Before(from) || r.start.After(to) {
			t.Errorf("%s: HTTP request at %s failed outside the gap: %v", s.ip, r.start.Format(time.StampMilli), r.err)
		}
	}
	if len(s.reqs) == 0 {
		t.Errorf("%s: no HTTP requests completed", s.ip)
	}
}
