package lanlive_test

import (
	"errors"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/eip-project/eip/internal/kubeclient/clientset"
	"github.com/eip-project/eip/internal/lanlive"
)

// shipped is the Secret as eip's manifests ship it: empty.
func shipped() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: lanlive.KeySecret, Namespace: "eip-system"}}
}

// TestLoadKeyFillsTheShippedSecret: the first eipd writes a random key
// into the empty Secret, every later one reads the same key.
func TestLoadKeyFillsTheShippedSecret(t *testing.T) {
	client := fake.NewClientset(shipped())
	first, _, err := lanlive.LoadKey(t.Context(), clientset.Adapt(client), "eip-system")
	assert.NilError(t, err)
	assert.Equal(t, len(first.Sign), 32)
	assert.Assert(t, first.Previous == nil)
	second, _, err := lanlive.LoadKey(t.Context(), clientset.Adapt(client), "eip-system")
	assert.NilError(t, err)
	assert.DeepEqual(t, second, first)
	s, err := client.CoreV1().Secrets("eip-system").Get(t.Context(), lanlive.KeySecret, metav1.GetOptions{})
	assert.NilError(t, err)
	assert.DeepEqual(t, s.Data[lanlive.KeyField], first.Sign)
}

// TestLoadKeyLosesTheFillRace: another eipd filled the Secret between this
// one's read and its update, which fails with Conflict; this one takes the
// other's key.
func TestLoadKeyLosesTheFillRace(t *testing.T) {
	client := fake.NewClientset(shipped())
	theirs := testKey("t")
	client.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		s := shipped()
		s.Data = map[string][]byte{lanlive.KeyField: theirs}
		if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("secrets"), s, s.Namespace); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(corev1.Resource("secrets"), lanlive.KeySecret, errors.New("the object has been modified"))
	})
	k, _, err := lanlive.LoadKey(t.Context(), clientset.Adapt(client), "eip-system")
	assert.NilError(t, err)
	assert.DeepEqual(t, k.Sign, theirs)
}

// TestLoadKeyWithoutTheSecret: eipd creates no Secret; it says where the
// Secret comes from.
func TestLoadKeyWithoutTheSecret(t *testing.T) {
	_, _, err := lanlive.LoadKey(t.Context(), clientset.Adapt(fake.NewClientset()), "eip-system")
	assert.ErrorContains(t, err, `liveness key: Secret eip-system/eip-liveness-key: secrets "eip-liveness-key" not found; it ships, empty, with eip's manifests and chart`)
}

func TestLoadKeyRefusesAShortKey(t *testing.T) {
	for field, data := range map[string]map[string][]byte{
		"key":      {lanlive.KeyField: []byte("0123")},
		"previous": {lanlive.KeyField: testKey("a"), lanlive.PreviousField: []byte("0123")},
	} {
		client := fake.NewClientset(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: lanlive.KeySecret, Namespace: "eip-system"},
			Data:       data,
		})
		_, _, err := lanlive.LoadKey(t.Context(), clientset.Adapt(client), "eip-system")
		assert.ErrorContains(t, err, `holds 4 bytes under "`+field+`", want at least 16`)
	}
}
