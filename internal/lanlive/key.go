package lanlive

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/kubeclient"
)

// KeySecret is the Secret, in eipd's namespace, that holds the key of
// liveness over the LAN under KeyField. The first eipd that finds none
// creates it; every other reads it. To change the key, delete the Secret
// and restart the DaemonSet.
const (
	KeySecret = "eip-liveness-key"
	KeyField  = "key"
)

// keySize is the size of a key eipd makes; minKeySize the least it accepts
// from a Secret written by someone else.
const (
	keySize    = 32
	minKeySize = 16
)

// LoadKey reads the liveness key from its Secret, creating the Secret with
// a random key when there is none. Two eipds creating it at once is
// harmless: one create fails with AlreadyExists and that eipd reads the
// other's key.
func LoadKey(ctx context.Context, client kubeclient.Interface, namespace string) ([]byte, error) {
	secrets := client.Secrets(namespace)
	s, err := secrets.Get(ctx, KeySecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		key := make([]byte, keySize)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("liveness key: %w", err)
		}
		s, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: KeySecret, Labels: map[string]string{"app.kubernetes.io/part-of": "eip"}},
			Data:       map[string][]byte{KeyField: key},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, KeySecret, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("liveness key: Secret %s/%s: %w", namespace, KeySecret, err)
	}
	key := s.Data[KeyField]
	if len(key) < minKeySize {
		return nil, fmt.Errorf("liveness key: Secret %s/%s holds %d bytes under %q, want at least %d", namespace, KeySecret, len(key), KeyField, minKeySize)
	}
	return key, nil
}
