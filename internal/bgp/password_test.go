package bgp

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/config"
)

// fakePasswords serves passwords by Secret name and counts the reads.
type fakePasswords struct {
	pw    map[string]string
	reads int
}

func (f *fakePasswords) Password(_ context.Context, name string) (string, error) {
	f.reads++
	if pw, ok := f.pw[name]; ok {
		return pw, nil
	}
	return "", errors.New("read Secret " + name + ": not found")
}

func TestSecretCacheFill(t *testing.T) {
	bgpOf := func(peers string) config.BGP {
		c, err := config.Parse(map[string]string{"bgp-asn": "64512", "bgp-peers": peers})
		assert.NilError(t, err)
		return c.BGP
	}
	passwords := func(b config.BGP) map[string]string {
		out := map[string]string{}
		for _, p := range b.Peers {
			out[p.Addr.String()] = p.Password
		}
		return out
	}
	src := &fakePasswords{pw: map[string]string{"rt": "Sesame-1"}}
	var c secretCache
	two := bgpOf("198.18.0.3 asn=64500 password-secret=rt\n198.18.0.4 asn=64500 password-secret=rt\n198.18.0.5 asn=64500 password=plain")

	b, err := c.fill(src, two)
	assert.NilError(t, err)
	assert.DeepEqual(t, passwords(b), map[string]string{"198.18.0.3": "Sesame-1", "198.18.0.4": "Sesame-1", "198.18.0.5": "plain"})
	assert.Equal(t, src.reads, 1, "one read per Secret")
	assert.Equal(t, two.Peers[0].Password, "", "the configuration in force is not written to")

	src.pw["rt"] = "Sesame-2"
	b, err = c.fill(src, two)
	assert.NilError(t, err)
	assert.Equal(t, src.reads, 1, "the same configuration reads nothing")
	assert.Equal(t, b.Peers[0].Password, "Sesame-1")

	delete(src.pw, "rt")
	moved := bgpOf("198.18.0.3 asn=64500 password-secret=rt hold-time=30s\n198.18.0.6 asn=64500 password-secret=other")
	b, err = c.fill(src, moved)
	assert.ErrorContains(t, err, "peer 198.18.0.6 (bgp-peers line 2): read Secret other: not found")
	// A failed read keeps the password read before, and leaves out a
	// peer without one.
	assert.DeepEqual(t, passwords(b), map[string]string{"198.18.0.3": "Sesame-1"})
	assert.Assert(t, !strings.Contains(err.Error(), "Sesame"))

	src.pw["other"] = "Sesame-3"
	src.pw["rt"] = "Sesame-4"
	b, err = c.fill(src, moved)
	assert.NilError(t, err, "a failed read is tried again")
	assert.DeepEqual(t, passwords(b), map[string]string{"198.18.0.3": "Sesame-4", "198.18.0.6": "Sesame-3"})
}

func TestSecretCacheWithoutReader(t *testing.T) {
	var c secretCache
	b, err := c.fill(nil, config.BGP{ASN: 64512, Peers: []config.Peer{{Addr: netip.MustParseAddr("198.18.0.3"), ASN: 64500, PasswordSecret: "rt", Line: 1}}})
	assert.ErrorContains(t, err, "read Secret rt: this eipd reads no Secrets")
	assert.Equal(t, len(b.Peers), 0)
}
