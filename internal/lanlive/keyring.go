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
// signing key among them). Each distinct key gets a serial number when it
// first enters the ring, so that what was taken in under a key can be
// forgotten once that key is no longer accepted (Session.Retain). Safe for
// concurrent use: the Secret's watch sets it while sockets read it.
type Keyring struct {
	mu     sync.RWMutex
	sign   []byte
	accept []ringKey
	// serial is the last serial number given; gen counts the changes to
	// the accepted keys.
	serial, gen uint64
}

// ringKey is an accepted key and its serial number.
type ringKey struct {
	key    []byte
	serial uint64
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
	next := make([]ringKey, len(all))
	changed := len(all) != len(k.accept)
	for i, a := range all {
		next[i] = ringKey{key: a}
		for _, old := range k.accept {
			if hmac.Equal(old.key, a) {
				next[i].serial = old.serial
			}
		}
		if next[i].serial == 0 {
			k.serial++
			next[i].serial = k.serial
			changed = true
		}
	}
	if changed {
		k.gen++
	}
	k.sign, k.accept = sign, next
	return nil
}

func (k *Keyring) signer() []byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.sign
}

// verify returns the serial number of the accepted key under which sum
// is the HMAC of body, 0 if none.
func (k *Keyring) verify(sum, body []byte) uint64 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, a := range k.accept {
		mac := hmac.New(sha256.New, a.key)
		mac.Write(body)
		if hmac.Equal(mac.Sum(nil), sum) {
			return a.serial
		}
	}
	return 0
}

// generation counts the changes to the accepted keys: a Conn that sees it
// change forgets what it took in under keys no longer accepted.
func (k *Keyring) generation() uint64 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.gen
}

// accepts reports whether the key of serial number serial is accepted.
func (k *Keyring) accepts(serial uint64) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, a := range k.accept {
		if a.serial == serial {
			return true
		}
	}
	return false
}
