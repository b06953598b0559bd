package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/testenv"
)

// The chart's PrometheusRule, with default values, holds exactly the
// groups of docs/alerts.rules.yaml, which Prometheus users load directly.
func TestAlertRulesMatchTheDocs(t *testing.T) {
	objs := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "prometheusRule.enabled=true"))
	chart := testenv.Path(objs["PrometheusRule eip-system/eip"], "spec")
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "alerts.rules.yaml"))
	assert.NilError(t, err)
	var docs map[string]any
	assert.NilError(t, yaml.Unmarshal(b, &docs))
	assert.DeepEqual(t, chart, docs)
}

// promtool checks the rules and runs docs/alerts.test.yaml: series shaped
// like each fault, and like the normal case beside it, fire exactly the
// alerts that test expects, when it expects them.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool := tool(t, "promtool", "promtool")
	docs := filepath.Join(repoRoot(t), "docs")
	for _, args := range [][]string{
		{"check", "rules", "alerts.rules.yaml"},
		{"test", "rules", "alerts.test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = docs
		out, err := cmd.CombinedOutput()
		assert.NilError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// Each alert is unit-tested, and fires in at least one test.
func TestEveryAlertIsTested(t *testing.T) {
	alerts := alertNames(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "alerts.test.yaml"))
	assert.NilError(t, err)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	assert.NilError(t, yaml.Unmarshal(b, &tests))
	var fired []string
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired = append(fired, a.Alertname)
			}
		}
	}
	for _, a := range alerts {
		assert.Check(t, slices.Contains(fired, a), "no test of docs/alerts.test.yaml makes %s fire", a)
	}
}

// The rules use only metrics that docs/metrics.md documents, and
// docs/alerts.md explains every alert.
func TestAlertsAreDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "alerts.rules.yaml"))
	assert.NilError(t, err)
	metricsDoc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	assert.NilError(t, err)
	for _, m := range regexp.MustCompile(`\beip_[a-z_]+`).FindAllString(string(b), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(m, "_count"), "_bucket")
		assert.Check(t, strings.Contains(string(metricsDoc), "`"+base+"`"), "docs/metrics.md does not document %s", base)
	}
	alertsDoc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "alerts.md"))
	assert.NilError(t, err)
	for _, a := range alertNames(t) {
		assert.Check(t, strings.Contains(string(alertsDoc), "### "+a+"\n"), "docs/alerts.md has no section on %s", a)
	}
}

func alertNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "alerts.rules.yaml"))
	assert.NilError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	assert.NilError(t, yaml.Unmarshal(b, &rules))
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	assert.Assert(t, len(names) > 0)
	return names
}
