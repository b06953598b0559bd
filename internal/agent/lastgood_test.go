package agent

import (
	"context"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// keptConfig is a LastGood holding one configuration, or none.
type keptConfig struct {
	data   map[string]string
	source string
	loads  int
}

func (k *keptConfig) Load(context.Context) (map[string]string, string, error) {
	k.loads++
	return k.data, k.source, nil
}

func (k *keptConfig) Save(context.Context, map[string]string, string) error { return nil }

type servingMetrics struct {
	nopMetrics
	notServing string
	valid      []bool
}

func (m *servingMetrics) NotServing(why string) { m.notServing = why }
func (m *servingMetrics) ConfigValid(ok bool)   { m.valid = append(m.valid, ok) }

var invalidConfig = map[string]string{"policy": "bogus", "ranges": "198.18.100.0/24"}

// restart is the world's eipd starting again under the ConfigMap as it is,
// with kept as the last good configuration in the cluster.
func (w *world) restart(kept LastGood, m Metrics) {
	w.a.opt.LastGood, w.a.opt.Metrics = kept, m
	w.a.recorder = record.NewFakeRecorder(16)
	w.s = newState(w.a)
	w.loadConfig()
	w.s.elig.judge(&w.s.desired, w.s.self.unheard, w.s.lan.lanPort)
}

// An eipd that starts while the ConfigMap is invalid serves with the last
// good configuration kept in the cluster, and says so in its heartbeat's
// error and in an InvalidConfig event; it is ready.
func TestStartUnderInvalidConfigUsesTheLastGood(t *testing.T) {
	w := newWorld(t, "n1", invalidConfig)
	kept := &keptConfig{data: map[string]string{"ranges": "198.18.100.0/28 name=kept"}, source: "41"}
	m := &servingMetrics{}
	w.restart(kept, m)

	assert.Assert(t, w.s.desired.cfgLoaded)
	assert.Equal(t, len(w.s.desired.cfg.Ranges), 1)
	assert.Equal(t, w.s.desired.cfg.Ranges[0].Name, "kept")
	assert.Assert(t, strings.Contains(w.s.desired.cfgErr, `policy "bogus" is not a policy`), w.s.desired.cfgErr)
	assert.Assert(t, strings.Contains(w.s.desired.cfgErr, "using the last good configuration, kept in ConfigMap eip-config-last-good (from resourceVersion 41)"), w.s.desired.cfgErr)
	ev := <-w.a.recorder.(*record.FakeRecorder).Events
	assert.Assert(t, strings.HasPrefix(ev, "Warning InvalidConfig invalid configuration: "), ev)
	assert.Equal(t, m.notServing, "")
	assert.DeepEqual(t, m.valid, []bool{false})
	assert.Equal(t, kept.loads, 1)
}

// Without a last good configuration (a fresh install whose first
// configuration is invalid) nothing is in force, and the node says it
// would not serve: /readyz fails.
func TestStartUnderInvalidConfigWithoutLastGood(t *testing.T) {
	w := newWorld(t, "n1", invalidConfig)
	m := &servingMetrics{}
	w.restart(&keptConfig{}, m)

	assert.Assert(t, !w.s.desired.cfgLoaded)
	assert.Assert(t, strings.Contains(w.s.desired.cfgErr, "no last good one is kept (eip-config-last-good): nothing is bound here"), w.s.desired.cfgErr)
	assert.Equal(t, m.notServing, "no valid configuration")

	// A last good configuration that is no longer valid (it now holds a
	// node's address) is not used either.
	w.must(w.nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", ResourceVersion: "1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.12"}}}}))
	kept := &keptConfig{data: map[string]string{"ranges": "198.18.0.0/24"}, source: "7"}
	w.restart(kept, m)
	assert.Assert(t, !w.s.desired.cfgLoaded)
	assert.Equal(t, m.notServing, "no valid configuration")
}

// A configuration put in force is offered to the store; an invalid one is
// not; a valid ConfigMap at start needs no last good one.
func TestAcceptedConfigIsKept(t *testing.T) {
	w := newWorld(t, "n1", map[string]string{"ranges": "198.18.100.0/24"})
	kept := &keptConfig{}
	w.restart(kept, &servingMetrics{})
	assert.Equal(t, kept.loads, 0)
	w.s.lastGood = newLastGoodSaver(kept, w.s.log)

	w.must(w.cms.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testCM, ResourceVersion: "9"}, Data: invalidConfig}))
	w.loadConfig()
	assert.Equal(t, len(w.s.lastGood.pending), 0)

	good := map[string]string{"ranges": "198.18.101.0/24"}
	w.must(w.cms.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testCM, ResourceVersion: "10"}, Data: good}))
	w.loadConfig()
	o := <-w.s.lastGood.pending
	assert.DeepEqual(t, o, lastGoodOffer{data: good, source: "10"}, cmpOffer)
}

// The ConfigMap store keeps the configuration of the newest
// resourceVersion: an older or equal one writes nothing.
func TestLastGoodConfigMapKeepsTheNewest(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: LastGoodName(testCM)}})
	store := LastGoodConfigMap{ConfigMaps: c.CoreV1().ConfigMaps(testNS), Name: LastGoodName(testCM)}

	data, src, err := store.Load(ctx)
	assert.NilError(t, err)
	assert.Assert(t, data == nil && src == "", "shipped empty: nothing kept")

	assert.NilError(t, store.Save(ctx, map[string]string{"policy": "spread"}, "20"))
	assert.NilError(t, store.Save(ctx, map[string]string{"policy": "sticky"}, "19")) // a lagging node
	writes := len(c.Actions())
	assert.NilError(t, store.Save(ctx, map[string]string{"policy": "spread"}, "20")) // every other node
	assert.Equal(t, countUpdates(c.Actions()[writes:]), 0)

	data, src, err = store.Load(ctx)
	assert.NilError(t, err)
	assert.DeepEqual(t, data, map[string]string{"policy": "spread"})
	assert.Equal(t, src, "20")
}

var cmpOffer = gocmp.AllowUnexported(lastGoodOffer{})

func countUpdates(actions []k8stesting.Action) int {
	n := 0
	for _, a := range actions {
		if a.GetVerb() == "update" {
			n++
		}
	}
	return n
}
