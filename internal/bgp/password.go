package bgp

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/config"
)

const (
	// PasswordKey is the key of a password-secret Secret that holds the
	// peer's TCP MD5 password.
	PasswordKey = "password"
	// ShippedPasswordSecret is the Secret name the shipped Role lets eipd
	// read; another name needs its own grant.
	ShippedPasswordSecret = "eip-bgp-password"
	// maxPasswordLen is the kernel's limit for a TCP MD5 key
	// (TCP_MD5SIG_MAXKEYLEN).
	maxPasswordLen = 80
	// readTimeout bounds a Secret read: it runs on the agent's loop.
	readTimeout = 5 * time.Second
)

// Passwords reads the password a bgp-peers line names by its Secret.
type Passwords interface {
	Password(ctx context.Context, secret string) (string, error)
}

// SecretGetter gets a Secret of eipd's namespace.
type SecretGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
}

// SecretPasswords reads passwords from Secrets. Its errors never hold the
// password.
type SecretPasswords struct{ Secrets SecretGetter }

var _ Passwords = SecretPasswords{}

// Password returns the PasswordKey of Secret name.
func (p SecretPasswords) Password(ctx context.Context, name string) (string, error) {
	s, err := p.Secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		return "", fmt.Errorf("read Secret %s: %w (the shipped Role lets eipd read %s only: grant get on this name too)", name, err, ShippedPasswordSecret)
	}
	if err != nil {
		return "", fmt.Errorf("read Secret %s: %w", name, err)
	}
	pw, ok := s.Data[PasswordKey]
	switch {
	case !ok || len(pw) == 0:
		return "", fmt.Errorf("read Secret %s: it has no key %q: put the password there", name, PasswordKey)
	case len(pw) > maxPasswordLen:
		return "", fmt.Errorf("read Secret %s: its %q is %d bytes, longer than the kernel's %d for TCP MD5 keys", name, PasswordKey, len(pw), maxPasswordLen)
	}
	return string(pw), nil
}

// secretCache keeps the passwords read from Secrets. They are read again
// only when the BGP configuration changes or a read failed: reading them
// on every Configure would cost the API server a request per node on every
// Node update. So a new password takes effect with a change of bgp-peers
// (pointing the line at a new Secret is the way to rotate).
type secretCache struct {
	passwords map[string]string // by Secret name
	readFor   config.BGP        // the configuration they were read for
	failed    bool              // a read failed: read again next time
}

// fill sets the Password of every peer of b that names a Secret. A peer
// whose Secret cannot be read keeps the password read before, if any, and
// is left out otherwise: without its password its session cannot come up.
func (c *secretCache) fill(src Passwords, b config.BGP) (config.BGP, error) {
	reread := c.failed || !b.Equal(c.readFor)
	if c.passwords == nil {
		c.passwords = map[string]string{}
	}
	read := map[string]error{}
	peers := make([]config.Peer, 0, len(b.Peers))
	var errs error
	for _, p := range b.Peers {
		if p.PasswordSecret == "" {
			peers = append(peers, p)
			continue
		}
		pw, known := c.passwords[p.PasswordSecret]
		if reread || !known {
			err, done := read[p.PasswordSecret]
			if !done {
				err = c.read(src, p.PasswordSecret)
				read[p.PasswordSecret] = err
			}
			if err != nil {
				errs = errors.Join(errs, fmt.Errorf("bgp: peer %s (bgp-peers line %d): %w", p.Addr, p.Line, err))
			}
			pw, known = c.passwords[p.PasswordSecret]
		}
		if !known {
			continue
		}
		p.Password = pw
		peers = append(peers, p)
	}
	c.readFor, c.failed = b, errs != nil
	b.Peers = peers
	return b, errs
}

func (c *secretCache) read(src Passwords, name string) error {
	if src == nil {
		return fmt.Errorf("read Secret %s: this eipd reads no Secrets", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	pw, err := src.Password(ctx, name)
	if err != nil {
		return err
	}
	c.passwords[name] = pw
	return nil
}
