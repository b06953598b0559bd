package charts

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/metrics"
)

// targetLabels are the labels Prometheus gives every series of a target:
// instance and job, and node, which the chart's ServiceMonitor sets.
var targetLabels = []string{"instance", "job", "node"}

// grafanaVariables stand for Grafana's interval variables, which PromQL
// does not know, so that the queries parse.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) ([]byte, dashboard) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "eip", "files", "dashboard.json"))
	assert.NilError(t, err)
	var d dashboard
	assert.NilError(t, json.Unmarshal(b, &d))
	return b, d
}

// The dashboard is off by default; on, it is a ConfigMap with the sidecar's
// label holding files/dashboard.json as it is.
func TestChartDashboard(t *testing.T) {
	for k := range objects(t, helm(t, "template", "eip", "charts/eip")) {
		assert.Check(t, !strings.HasSuffix(k, "-dashboard"), "rendered %s by default", k)
	}
	objs := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "grafanaDashboard.enabled=true",
		"--set", "grafanaDashboard.annotations.grafana_folder=Network"))
	cm := one[corev1.ConfigMap](t, objs, "ConfigMap eip-system/eip-dashboard")
	assert.Check(t, is.Equal(cm.Labels["grafana_dashboard"], "1"))
	assert.Check(t, is.Equal(cm.Annotations["grafana_folder"], "Network"))
	file, _ := readDashboard(t)
	var want, got any
	assert.NilError(t, json.Unmarshal(file, &want))
	assert.NilError(t, json.Unmarshal([]byte(cm.Data["eip.json"]), &got))
	assert.DeepEqual(t, got, want)
}

// Every query of the dashboard parses, as Prometheus's own parser reads
// it, and selects only metrics that eipd's registry exports, matching and
// grouping by labels those metrics have (or that every target has). The
// panels the dashboard promises read the metrics they are about.
func TestDashboardQueriesUseWhatEipdExports(t *testing.T) {
	promql := tool(t, "promql", "promql")
	exported := exportedLabels(t)
	_, d := readDashboard(t)
	var exprs []string
	for _, p := range d.Panels {
		assert.Check(t, len(p.Targets) > 0, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			exprs = append(exprs, grafanaVariables.Replace(tg.Expr))
		}
	}
	cmd := exec.Command(promql)
	cmd.Stdin = strings.NewReader(strings.Join(exprs, "\n") + "\n")
	out, err := cmd.Output()
	assert.NilError(t, err)
	used := map[string]bool{}
	lines := bufio.NewScanner(bytes.NewReader(out))
	n := 0
	for lines.Scan() {
		n++
		var q struct {
			Expr     string              `json:"expr"`
			Metrics  map[string][]string `json:"metrics"`
			Grouping []string            `json:"grouping"`
			Error    string              `json:"error"`
		}
		assert.NilError(t, json.Unmarshal(lines.Bytes(), &q))
		if !assert.Check(t, q.Error == "", "%s: %s", q.Expr, q.Error) {
			continue
		}
		assert.Check(t, len(q.Metrics) > 0, "%s selects no metric", q.Expr)
		known := slices.Clone(targetLabels)
		for m, labels := range q.Metrics {
			used[m] = true
			have, ok := exported[m]
			if !assert.Check(t, ok, "%s: eipd exports no %s", q.Expr, m) {
				continue
			}
			known = append(known, have...)
			for _, l := range labels {
				assert.Check(t, slices.Contains(have, l) || slices.Contains(targetLabels, l), "%s: %s has no label %s (it has %v)", q.Expr, m, l, have)
			}
		}
		for _, l := range q.Grouping {
			assert.Check(t, slices.Contains(known, l), "%s: groups by %s, which none of its metrics has", q.Expr, l)
		}
	}
	assert.Equal(t, n, len(exprs))
	for _, m := range []string{
		"eip_range_addresses", "eip_ips_held", "eip_acquisitions_total", "eip_handoffs_total", "eip_lease_conflicts_total",
		"eip_address_conflicts_total", "eip_lease_writes_total", "process_resident_memory_bytes", "process_cpu_seconds_total",
	} {
		assert.Check(t, used[m], "no panel reads %s", m)
	}
}

// exportedLabels are the series names eipd's registry exports, each with
// its label names: every labelled family is given a series first, and a
// histogram's or summary's series carry their own suffixes.
func exportedLabels(t *testing.T) map[string][]string {
	t.Helper()
	m, err := metrics.New(metrics.Options{Clock: clocktesting.NewFakeClock(time.Now()), Announced: func() uint64 { return 0 }, Version: "v1"})
	assert.NilError(t, err)
	m.APIError("renew")
	m.EventSummarised("Bound")
	m.BGP([]bgp.Session{{Peer: netip.MustParseAddr("198.18.0.1"), State: "established"}}, 1)
	cfg, err := config.Parse(map[string]string{"ranges": "198.18.100.0/24"})
	assert.NilError(t, err)
	m.Ranges(ipset.RangeUsage(cfg, slices.Values([]ipset.Entry(nil)), nil, nil))
	families, err := m.Registry().Gather()
	assert.NilError(t, err)
	out := map[string][]string{}
	for _, f := range families {
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		case dto.MetricType_SUMMARY:
			out[name] = append(slices.Clone(labels), "quantile")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		default:
			out[name] = labels
		}
	}
	return out
}
