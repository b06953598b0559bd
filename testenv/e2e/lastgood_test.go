package e2e

import (
	"maps"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"gotest.tools/v3/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/agent"
	"github.com/eip-project/eip/testenv"
)

// Every eipd killed at once and started again while eip-config is invalid
// (written here with no admission policy in the way, as one written before
// the policy was installed) serves with the last good configuration, kept
// in eip-config-last-good: the IP is answered again by its holder, and the
// eipds say why in an InvalidConfig event.
func TestRestartUnderInvalidConfigServesTheLastGood(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := netip.MustParseAddr("198.18.100.60")
	e.service("kept", ip)
	e.served(ip)
	e.eventually("the configuration kept as the last good one", func() (bool, string) {
		cm, err := e.k.CoreV1().ConfigMaps(testenv.Namespace).Get(e.ctx, agent.LastGoodName(testenv.ConfigMap), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return maps.Equal(cm.Data, defaultConfig()), "kept " + strings.Join(slicesOf(cm.Data), ", ")
	})

	bad := defaultConfig()
	bad["policy"] = "bogus"
	e.setConfig(bad)
	for _, n := range e.nodes {
		e.must(e.c.StopDaemon(n, syscall.SIGKILL))
	}
	for _, n := range e.nodes {
		e.start(n)
	}
	holder := e.served(ip)
	assert.Assert(t, holder != "")
	evs := e.events("ConfigMap", testenv.ConfigMap, "InvalidConfig")
	found := false
	for _, ev := range evs {
		found = found || strings.Contains(ev.Message, "using the last good configuration, kept in ConfigMap eip-config-last-good")
	}
	assert.Assert(t, found, "%v", evs)
}

func slicesOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}
