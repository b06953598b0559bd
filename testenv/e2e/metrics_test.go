package e2e

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// appearsOnFirstError are the documented families with a label but no
// series until the first sample (docs/metrics.md: "eip_api_errors_total{op}
// appears on a node's first error of that kind", and likewise
// eip_events_summarised_total{reason}), and the per-peer BGP families,
// which have none while no BGP peer is configured.
var appearsOnFirstError = []string{"eip_api_errors_total", "eip_events_summarised_total", "eip_bgp_session_up", "eip_bgp_updates_sent_total", "eip_bgp_routes_received"}

// Every eipd serves exactly the eip_* metric families docs/metrics.md
// documents, scraped from the LAN as a Prometheus server would, and its
// health and readiness checks answer.
func TestMetricsAreExported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	documented := documentedMetrics(t)
	t.Logf("documented: %v", documented)
	for _, n := range e.nodes {
		for _, path := range []string{"/healthz", "/readyz"} {
			e.eventually(path+" of "+n, func() (bool, string) {
				code, _, err := e.getDaemon(n, path)
				return err == nil && code == http.StatusOK, fmt.Sprintf("status %d, %v", code, err)
			})
		}
		m := e.scrape(n)
		var exposed []string
		for f := range m.families {
			if strings.HasPrefix(f, "eip_") {
				exposed = append(exposed, f)
			}
		}
		slices.Sort(exposed)
		for _, f := range exposed {
			assert.Check(t, slices.Contains(documented, f), "%s exposes %s, which docs/metrics.md does not document", n, f)
		}
		for _, f := range documented {
			if !slices.Contains(exposed, f) {
				assert.Check(t, slices.Contains(appearsOnFirstError, f), "%s does not expose %s, which docs/metrics.md documents", n, f)
			}
		}
		assert.Equal(t, m.families["eip_failover_duration_seconds"], "histogram")
		assert.Equal(t, m.families["eip_heartbeat_renew_duration_seconds"], "histogram")
		for _, s := range []string{
			`eip_acquisitions_total{kind="new"}`, `eip_acquisitions_total{kind="takeover"}`,
			"eip_failover_duration_seconds_count", "eip_failover_duration_seconds_sum",
			`eip_failover_duration_seconds_bucket{le="+Inf"}`,
		} {
			_, ok := m.samples[s]
			assert.Check(t, ok, "%s lacks the series %s", n, s)
		}
		assert.Check(t, m.samples["eip_heartbeat_renew_duration_seconds_count"] > 0, "%s has renewed its heartbeat", n)
		t.Logf("%s exposes %d eip_* families", n, len(exposed))
	}
}

// Binding, a move and a takeover each show in the counters of the node that
// did it, and as Events on the Service: Bound, Moved, TakenOver.
func TestMetricsAndEventsOfMoveAndTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(180)
	svc := e.service("metered", ip)
	first := e.served(ip)

	e.eventually("eip_ips_held of "+first+" matches its addresses", func() (bool, string) {
		held, bound := e.scrape(first).samples["eip_ips_held"], len(e.testAddrs(first))
		return held == float64(bound) && bound == 1, fmt.Sprintf("eip_ips_held %v, %d addresses bound", held, bound)
	})
	// Every node counts the one IP as managed, so the EipIPUnbound alert
	// (max of eip_ips_managed over the sum of eip_ips_held) sees 1 - 1.
	for _, n := range e.nodes {
		e.eventually("eip_ips_managed of "+n+" is 1", func() (bool, string) {
			v := e.scrape(n).samples["eip_ips_managed"]
			return v == 1, fmt.Sprintf("eip_ips_managed %v", v)
		})
	}
	m := e.scrape(first)
	assert.Check(t, m.samples["eip_binds_total"] >= 1, "eip_binds_total %v", m.samples["eip_binds_total"])
	assert.Check(t, m.samples["eip_announcements_sent_total"] > 0, "eip_announcements_sent_total %v", m.samples["eip_announcements_sent_total"])
	assert.Check(t, m.samples[`eip_acquisitions_total{kind="new"}`] >= 1, "new acquisitions %v", m.samples[`eip_acquisitions_total{kind="new"}`])

	// A move: the old holder counts one handoff.
	second := e.other(first)
	handoffs := m.samples["eip_handoffs_total"]
	e.editLock(ip, func(l *coordinationv1.Lease) { l.Annotations[lease.AnnotationMoveTo] = second })
	assert.Equal(t, e.served(ip), second)
	e.counterReaches(first, "eip_handoffs_total", handoffs+1)
	e.serviceEvent(svc, "Moved", fmt.Sprintf("%s handed from %s to %s", ip, first, second))

	// A takeover: the survivor that takes the IP counts one takeover and
	// one failover duration; no survivor counts more.
	survivors := []string{first, e.other(first, second)}
	takeovers, failovers := map[string]float64{}, map[string]float64{}
	for _, n := range survivors {
		s := e.scrape(n).samples
		takeovers[n], failovers[n] = s[`eip_acquisitions_total{kind="takeover"}`], s["eip_failover_duration_seconds_count"]
	}
	e.must(e.c.StopDaemon(second, syscall.SIGKILL))
	var third string
	e.eventually("a survivor holds "+ip.String(), func() (bool, string) {
		third = e.holder(ip)
		return third != "" && third != second, "holder " + third
	})
	assert.Equal(t, e.served(ip), third)
	e.counterReaches(third, `eip_acquisitions_total{kind="takeover"}`, takeovers[third]+1)
	e.counterReaches(third, "eip_failover_duration_seconds_count", failovers[third]+1)
	for _, n := range survivors {
		s := e.scrape(n).samples
		want := 0.0
		if n == third {
			want = 1
		}
		assert.Check(t, s[`eip_acquisitions_total{kind="takeover"}`]-takeovers[n] == want, "%s: takeovers %v, before %v", n, s[`eip_acquisitions_total{kind="takeover"}`], takeovers[n])
		assert.Check(t, s["eip_failover_duration_seconds_count"]-failovers[n] == want, "%s: failovers %v, before %v", n, s["eip_failover_duration_seconds_count"], failovers[n])
	}
	t.Logf("%s: acquired by %s, moved to %s, taken over by %s", ip, first, second, third)
	e.serviceEvent(svc, "TakenOver", fmt.Sprintf("%s taken over by %s from %s", ip, third, second))
	for _, n := range []string{first, second, third} {
		e.serviceEvent(svc, "Bound", fmt.Sprintf("%s/32 bound on %s ", ip, n))
	}

	e.start(second)
}

// documentedMetrics reads the metric names of the "eip metrics" table of
// docs/metrics.md.
func documentedMetrics(t *testing.T) []string {
	t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	assert.NilError(t, err)
	_, table, ok := strings.Cut(string(b), "\n## eip metrics\n")
	assert.Assert(t, ok, "docs/metrics.md has no section \"eip metrics\"")
	table, _, _ = strings.Cut(table, "\n## ")
	var names []string
	for _, line := range strings.Split(table, "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			names = append(names, name)
		}
	}
	assert.Assert(t, len(names) > 0, "no metrics in docs/metrics.md")
	slices.Sort(names)
	return names
}

// exposition is one scrape: the families with their types, and each series
// (name and labels as exposed) with its value.
type exposition struct {
	families map[string]string
	samples  map[string]float64
}

// parseExposition reads the Prometheus text format as client_golang writes
// it: no timestamps, so a series' value is its last field.
func parseExposition(r io.Reader) (exposition, error) {
	m := exposition{families: map[string]string{}, samples: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if typ, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(typ, " ")
			m.families[name] = kind
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return m, fmt.Errorf("parse sample %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return m, fmt.Errorf("parse sample %q: %w", line, err)
		}
		m.samples[line[:i]] = v
	}
	return m, sc.Err()
}

// getDaemon requests path of node's metrics endpoint from the client namespace.
func (e *env) getDaemon(node, path string) (int, []byte, error) {
	resp, err := e.c.ClientHTTP().Get("http://" + e.c.DaemonMetricsAddr(node) + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// scrape reads node's /metrics, retrying until it answers.
func (e *env) scrape(node string) exposition {
	e.t.Helper()
	var m exposition
	e.eventually("/metrics of "+node, func() (bool, string) {
		code, b, err := e.getDaemon(node, "/metrics")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("status %d, %v", code, err)
		}
		m, err = parseExposition(strings.NewReader(string(b)))
		return err == nil, fmt.Sprint(err)
	})
	return m
}

// counterReaches waits until series on node has the value want: counters
// are updated when a write's result comes back, which may be after the
// API server shows it.
func (e *env) counterReaches(node, series string, want float64) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%s of %s reaches %v", series, node, want), func() (bool, string) {
		got, ok := e.scrape(node).samples[series]
		return ok && got == want, fmt.Sprintf("%v", got)
	})
}

// serviceEvent waits until the API server lists an event of reason on svc
// (this very object: events of earlier Services of the same name do not
// count) whose message contains want.
func (e *env) serviceEvent(svc *corev1.Service, reason, want string) {
	e.t.Helper()
	sel := fields.Set{
		"involvedObject.kind": "Service",
		"involvedObject.name": svc.Name,
		"involvedObject.uid":  string(svc.UID),
		"reason":              reason,
	}.AsSelector().String()
	e.eventually(reason+" event on "+svc.Name, func() (bool, string) {
		list, err := e.k.CoreV1().Events(svc.Namespace).List(e.ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		msgs := map[string]bool{}
		for _, ev := range list.Items {
			if strings.Contains(ev.Message, want) {
				return ev.Type == corev1.EventTypeNormal, "type " + ev.Type
			}
			msgs[ev.Message] = true
		}
		return false, fmt.Sprintf("want %q, have %q", want, slices.Sorted(maps.Keys(msgs)))
	})
}
