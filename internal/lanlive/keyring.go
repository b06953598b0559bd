package lanlive

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
)

// Keyring holds the keys of liveness over the LAN: the one that signs
// what this node sends, and every key whose signature it accepts (the
// signing key among them). Safe for concurrent use: the Secret's watch
// sets it while sockets read it.
type Keyring struct {
	mu     sync.RWMutex
	sign   []byte
	accept [][]byte
}

// NewKeyring returns a Keyring that signs with sign and accepts it and
// accept; see Set.
func NewKeyring(sign []byte, accept ...[]byte) (*Keyring, error) {
	k := &Keyring{}
	if err := k.Set(sign, accept...); err != nil {
		return nil, err
	}
	return k, nil
}

// Set makes sign the signing key, and accepts it and every key of accept
// (nil ones stand for none). A key shorter than minKeySize is refused, and
// the keys stay as they were.
func (k *Keyring) Set(sign []byte, accept ...[]byte) error {
	all := [][]byte{sign}
	for _, a := range accept {
		if a != nil && !slices.ContainsFunc(all, func(b []byte) bool { return hmac.Equal(a, b) }) {
			all = append(all, a)
		}
	}
	for _, a := range all {
		if len(a) < minKeySize {
			return fmt.Errorf("liveness over the LAN: a key of %d bytes, want at least %d", len(a), minKeySize)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sign, k.accept = sign, all
	return nil
}

func (k *Keyring) signer() []byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.sign
}

// verify reports whether sum is the HMAC of body under an accepted key.
func (k *Keyring) verify(sum, body []byte) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, key := range k.accept {
		mac := hmac.New(sha256.New, key)
		mac.Write(body)
		if hmac.Equal(mac.Sum(nil), sum) {
			return true
		}
	}
	return false
}
