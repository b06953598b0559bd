package lanlive_test

import (
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/eip-project/eip/internal/kubeclient/clientset"
	"github.com/eip-project/eip/internal/lanlive"
)

// TestLoadKeyMakesOneKeyForAll: the first eipd creates the Secret with a
// random key, every later one reads the same key.
func TestLoadKeyMakesOneKeyForAll(t *testing.T) {
	client := fake.NewClientset()
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
