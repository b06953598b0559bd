package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The API server's own count of the requests it served, and their
// latency histogram.
const (
	requestsMetric = "apiserver_request_total"
	durationMetric = "apiserver_request_duration_seconds"
)

// The verbs of apiserver_request_total (HTTP methods, with GET split into
// GET, LIST and WATCH) that change a Lease, and those that read one. A
// WATCH is counted when it ends.
var (
	writeVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}
	readVerbs  = []string{"GET", "LIST", "WATCH"}
)

// RequestCounts is apiserver_request_total for one resource, summed over
// every label but the verb.
type RequestCounts map[string]float64

// ParseRequestCounts reads the Prometheus text exposition of an API server
// and sums apiserver_request_total{resource=resource} by verb.
func ParseRequestCounts(text []byte, resource string) (RequestCounts, error) {
	return sumByVerb(text, requestsMetric, resource, "")
}

// sumByVerb sums the samples of metric whose resource label is resource
// (and whose code label is code, unless code is empty), by their verb.
func sumByVerb(text []byte, metric, resource, code string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		labels, value, err := parseSample(rest)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
		if labels["resource"] == resource && (code == "" || labels["code"] == code) {
			out[labels["verb"]] += value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// parseSample parses `k="v",…} value [timestamp]`, the rest of a sample
// line after its opening brace.
func parseSample(s string) (map[string]string, float64, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			s = s[1:]
			break
		}
		key, rest, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			return nil, 0, fmt.Errorf("malformed label at %q", s)
		}
		var val strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					c = '\n'
				default:
					c = rest[i]
				}
			}
			val.WriteByte(c)
		}
		if i >= len(rest) {
			return nil, 0, fmt.Errorf("unterminated label value at %q", s)
		}
		labels[strings.TrimSpace(key)] = val.String()
		s = rest[i+1:]
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, 0, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return nil, 0, fmt.Errorf("value: %w", err)
	}
	return labels, v, nil
}

// LeaseMetrics is what the API server says of the Lease requests it
// served so far.
type LeaseMetrics struct {
	// Requests counts them by verb; Seconds sums their durations by verb;
	// Conflicts counts those refused with 409 Conflict (a lost race).
	Requests  RequestCounts      `json:"requests"`
	Seconds   map[string]float64 `json:"seconds"`
	Conflicts RequestCounts      `json:"conflicts"`
}

// MeanLatency is the mean duration of the requests of verb between two
// scrapes, 0 when there were none.
func MeanLatency(before, after LeaseMetrics, verb string) time.Duration {
	n := after.Requests[verb] - before.Requests[verb]
	if n <= 0 {
		return 0
	}
	return time.Duration((after.Seconds[verb] - before.Seconds[verb]) / n * float64(time.Second))
}

// ScrapeLeases reads the API server's /metrics and returns its Lease
// request counts and durations.
func ScrapeLeases(ctx context.Context, cfg *rest.Config) (LeaseMetrics, error) {
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return LeaseMetrics{}, fmt.Errorf("scrape apiserver metrics: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := k.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return LeaseMetrics{}, fmt.Errorf("scrape apiserver metrics: %w", err)
	}
	var m LeaseMetrics
	if m.Requests, err = ParseRequestCounts(b, "leases"); err != nil {
		return m, err
	}
	if m.Seconds, err = sumByVerb(b, durationMetric+"_sum", "leases", ""); err != nil {
		return m, err
	}
	if m.Conflicts, err = sumByVerb(b, requestsMetric, "leases", "409"); err != nil {
		return m, err
	}
	return m, nil
}

// LeaseRequests scrapes the API server's Lease request counts.
func LeaseRequests(ctx context.Context, cfg *rest.Config) (RequestCounts, error) {
	m, err := ScrapeLeases(ctx, cfg)
	return m.Requests, err
}

// Rates are request rates over a window.
type Rates struct {
	Window time.Duration      `json:"window"`
	Writes float64            `json:"writesPerSec"`
	Reads  float64            `json:"readsPerSec"`
	ByVerb map[string]float64 `json:"perSecByVerb"`
}

// RatesBetween turns two scrapes taken d apart into rates per second.
func RatesBetween(before, after RequestCounts, d time.Duration) Rates {
	r := Rates{Window: d, ByVerb: map[string]float64{}}
	secs := d.Seconds()
	if secs <= 0 {
		return r
	}
	for verb, n := range after {
		if delta := n - before[verb]; delta > 0 {
			r.ByVerb[verb] = delta / secs
		}
	}
	for _, v := range writeVerbs {
		r.Writes += r.ByVerb[v]
	}
	for _, v := range readVerbs {
		r.Reads += r.ByVerb[v]
	}
	return r
}
