package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APITotals are the API server's own counters, summed over every resource:
// the requests it served, the watch events it sent, its CPU time.
type APITotals struct {
	At     time.Time     `json:"at"`
	Writes float64       `json:"writes"`
	Reads  float64       `json:"reads"`
	Events float64       `json:"watchEvents"`
	CPU    time.Duration `json:"cpu"`
}

// APILoad is what the API server did per second between two APITotals.
type APILoad struct {
	Window time.Duration `json:"window"`
	Writes float64       `json:"writesPerSec"`
	Reads  float64       `json:"readsPerSec"`
	// Events are watch events sent to all watchers
	// (apiserver_watch_events_total).
	Events float64 `json:"watchEventsPerSec"`
	// CPU is the API server's CPU in percent of one core
	// (process_cpu_seconds_total).
	CPU float64 `json:"cpuPercent"`
}

// LoadBetween turns two scrapes into rates.
func LoadBetween(a, b APITotals) APILoad {
	d := b.At.Sub(a.At)
	secs := d.Seconds()
	if secs <= 0 {
		return APILoad{Window: d}
	}
	return APILoad{
		Window: d,
		Writes: (b.Writes - a.Writes) / secs,
		Reads:  (b.Reads - a.Reads) / secs,
		Events: (b.Events - a.Events) / secs,
		CPU:    100 * (b.CPU - a.CPU).Seconds() / secs,
	}
}

// ScrapeAPITotals reads the API server's /metrics.
func ScrapeAPITotals(ctx context.Context, cfg *rest.Config) (APITotals, error) {
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return APITotals{}, fmt.Errorf("scrape apiserver metrics: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := k.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return APITotals{}, fmt.Errorf("scrape apiserver metrics: %w", err)
	}
	t, err := ParseAPITotals(b)
	t.At = time.Now()
	return t, err
}

// ParseAPITotals sums the counters of one /metrics text.
func ParseAPITotals(text []byte) (APITotals, error) {
	var t APITotals
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return t, fmt.Errorf("parse %q: %w", line, err)
			}
			t.CPU = time.Duration(secs * float64(time.Second))
			continue
		}
		for _, m := range []string{requestsMetric, "apiserver_watch_events_total"} {
			rest, ok := strings.CutPrefix(line, m+"{")
			if !ok {
				continue
			}
			labels, v, err := parseSample(rest)
			if err != nil {
				return t, fmt.Errorf("parse %q: %w", line, err)
			}
			switch {
			case m != requestsMetric:
				t.Events += v
			case slices.Contains(writeVerbs, labels["verb"]):
				t.Writes += v
			case slices.Contains(readVerbs, labels["verb"]):
				t.Reads += v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return t, fmt.Errorf("read metrics: %w", err)
	}
	return t, nil
}
