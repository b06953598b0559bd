package lanlive

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/kubeclient/clientset"
)

func key(s string) []byte { return bytes.Repeat([]byte(s), 32) }

// signs reports whether the Keyring signs with k, and accepted whether it
// accepts a signature made with each key.
func signs(r *Keyring, k []byte) bool { return bytes.Equal(r.signer(), k) }

func accepted(r *Keyring, k []byte) bool {
	signed := sign(k, []byte("x"))
	return r.verify(signed[:32], signed[32:]) != 0
}

// eventually polls cond until it holds, failing after a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(end) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The documented rotation: the Secret gets a new key, the old one under
// previous. The new key is accepted at once and signs KeyGrace later; the
// old one stays accepted. A Secret edited to a bad key changes nothing.
func TestKeyWatchRotates(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: KeySecret, Namespace: "eip-system"},
		Data:       map[string][]byte{KeyField: key("a")},
	})
	keys, rv, err := LoadKey(ctx, clientset.Adapt(client), "eip-system")
	assert.NilError(t, err)
	ring, err := NewKeyring(keys.Sign, keys.Previous)
	assert.NilError(t, err)
	clk := clocktesting.NewFakeClock(time.Now())
	done := make(chan struct{})
	go func() {
		defer close(done)
		KeyWatch{Client: clientset.Adapt(client), Namespace: "eip-system", Ring: ring, Clock: clk,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}.Run(ctx, keys, rv)
	}()
	defer func() {
		cancel()
		<-done
	}()
	update := func(data map[string][]byte) {
		_, err := client.CoreV1().Secrets("eip-system").Update(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: KeySecret, Namespace: "eip-system"}, Data: data,
		}, metav1.UpdateOptions{})
		assert.NilError(t, err)
	}
	eventually(t, "the watch did not start", func() bool { return len(client.Actions()) >= 2 })
	update(map[string][]byte{KeyField: key("b"), PreviousField: key("a")})
	eventually(t, "the new key is not accepted", func() bool { return accepted(ring, key("b")) })
	assert.Assert(t, signs(ring, key("a")), "signs with the old key during the grace")
	eventually(t, "no grace timer", clk.HasWaiters)
	clk.Step(KeyGrace)
	eventually(t, "does not sign with the new key after the grace", func() bool { return signs(ring, key("b")) })
	assert.Assert(t, accepted(ring, key("a")), "the previous key stays accepted")

	update(map[string][]byte{KeyField: key("b")})
	eventually(t, "the previous key, removed, is still accepted", func() bool { return !accepted(ring, key("a")) })

	update(map[string][]byte{KeyField: []byte("short")})
	update(map[string][]byte{KeyField: key("b"), PreviousField: key("c")})
	eventually(t, "the watch stopped at a bad key", func() bool { return accepted(ring, key("c")) })
	assert.Assert(t, signs(ring, key("b")))
}
