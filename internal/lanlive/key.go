package lanlive

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/kubeclient"
)

// KeySecret is the Secret, in eipd's namespace, that holds the key of
// liveness over the LAN under KeyField, and during a rotation the key
// before it under PreviousField. It ships empty; the first eipd fills it
// and every eipd watches it (docs/operating.md, rotating the key).
const (
	KeySecret     = "eip-liveness-key"
	KeyField      = "key"
	PreviousField = "previous"
)

// keySize is the size of a key eipd makes; minKeySize the least it accepts
// from a Secret written by someone else.
const (
	keySize    = 32
	minKeySize = 16
)

// KeyGrace is how long an eipd keeps signing with its old key after it
// sees a new one, while it already accepts the new one: every eipd sees
// the change through its own watch, some later than others, and one that
// signed with the new key at once would go unheard by those that have not
// seen it yet. Watches deliver within a second; ten leave room for an API
// server under load.
const KeyGrace = 10 * time.Second

// Keys are the keys a Secret holds: the one that signs and the previous
// one (nil: none), which is still accepted.
type Keys struct {
	Sign, Previous []byte
}

// keysOf reads the keys of s.
func keysOf(s *corev1.Secret) (Keys, error) {
	k := Keys{Sign: s.Data[KeyField], Previous: s.Data[PreviousField]}
	for field, key := range map[string][]byte{KeyField: k.Sign, PreviousField: k.Previous} {
		if (key != nil || field == KeyField) && len(key) < minKeySize {
			return Keys{}, fmt.Errorf("liveness key: Secret %s/%s holds %d bytes under %q, want at least %d", s.Namespace, KeySecret, len(key), field, minKeySize)
		}
	}
	return k, nil
}

// LoadKey reads the liveness keys from their Secret. The Secret ships
// empty with eip's manifests, and the first eipd to find it so writes a
// random key into it: RBAC can limit an update to one name, where a create
// would have to be allowed for every name. Two eipds filling it at once is
// harmless: the update on the resourceVersion read fails with Conflict for
// one, and that eipd reads the other's key. A missing Secret is an error
// saying where it comes from. It returns the Secret's resourceVersion,
// from which KeyWatch.Run goes on.
func LoadKey(ctx context.Context, client kubeclient.Interface, namespace string) (Keys, string, error) {
	secrets := client.Secrets(namespace)
	s, err := secrets.Get(ctx, KeySecret, metav1.GetOptions{})
	if err == nil && len(s.Data[KeyField]) == 0 {
		s, err = fillKey(ctx, secrets, s)
		if apierrors.IsConflict(err) {
			s, err = secrets.Get(ctx, KeySecret, metav1.GetOptions{})
		}
	}
	if apierrors.IsNotFound(err) {
		err = fmt.Errorf("%w; it ships, empty, with eip's manifests and chart", err)
	}
	if err != nil {
		return Keys{}, "", fmt.Errorf("liveness key: Secret %s/%s: %w", namespace, KeySecret, err)
	}
	s.Namespace = namespace
	k, err := keysOf(s)
	return k, s.ResourceVersion, err
}

// fillKey writes a random key into s, which holds none, on the
// resourceVersion read.
func fillKey(ctx context.Context, secrets kubeclient.Resource[*corev1.Secret, *corev1.SecretList], s *corev1.Secret) (*corev1.Secret, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	s = s.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[KeyField] = key
	return secrets.Update(ctx, s, metav1.UpdateOptions{})
}

// KeyWatch keeps a Keyring in step with the Secret.
type KeyWatch struct {
	Client    kubeclient.Interface
	Namespace string
	Ring      *Keyring
	Clock     clock.Clock
	Log       *slog.Logger
}

// Run watches the Secret from resourceVersion rv, whose keys are current
// (the ones the Keyring was made with), until ctx ends. A new signing key
// is accepted at once and signs from KeyGrace later; the keys it replaces
// are accepted meanwhile. A Secret that holds no valid key, or is deleted,
// changes nothing: the last good keys stay, and the log says why.
func (w KeyWatch) Run(ctx context.Context, current Keys, rv string) {
	var grace <-chan time.Time
	var next Keys // the keys that sign once grace ends
	for ctx.Err() == nil {
		wi, err := w.Client.Secrets(w.Namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", KeySecret).String(), ResourceVersion: rv,
		})
		if err != nil {
			w.Log.Warn("watch the liveness key", "err", err)
			rv = ""
			if !w.wait(ctx, time.Second) {
				return
			}
			continue
		}
	events:
		for {
			select {
			case <-ctx.Done():
				wi.Stop()
				return
			case <-grace:
				grace = nil
				current = next
				w.set(current)
				w.Log.Info("liveness datagrams are signed with the new key")
			case ev, ok := <-wi.ResultChan():
				if !ok {
					break events
				}
				s, isSecret := ev.Object.(*corev1.Secret)
				if !isSecret || ev.Type == watch.Deleted || ev.Type == watch.Error {
					if ev.Type == watch.Error {
						rv = ""
						wi.Stop()
						break events
					}
					if ev.Type == watch.Deleted {
						w.Log.Warn("the liveness key's Secret was deleted; keeping the keys in force", "secret", KeySecret)
					}
					continue
				}
				rv = s.ResourceVersion
				k, err := keysOf(s)
				if err != nil {
					w.Log.Error("liveness key not changed", "err", err)
					continue
				}
				if hmac.Equal(k.Sign, current.Sign) {
					grace, current = nil, k
					w.set(current)
					continue
				}
				// A new key: accept it now, sign with it later.
				next = k
				grace = w.Clock.After(KeyGrace)
				if err := w.Ring.Set(current.Sign, k.Sign, k.Previous, current.Previous); err != nil {
					w.Log.Error("liveness key not changed", "err", err)
					continue
				}
				w.Log.Info("a new liveness key: accepted now, signing with it from later", "after", KeyGrace)
			}
		}
		if rv == "" && !w.wait(ctx, time.Second) {
			return
		}
	}
}

func (w KeyWatch) set(k Keys) {
	if err := w.Ring.Set(k.Sign, k.Previous); err != nil {
		w.Log.Error("liveness key not changed", "err", err)
	}
}

// wait waits d or until ctx ends, reporting whether ctx is still live.
func (w KeyWatch) wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-w.Clock.After(d):
		return true
	}
}
