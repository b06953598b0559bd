package bgp

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/eip-project/eip/internal/config"
)

// ARPFilter keeps the node from answering ARP for the given ranges
// (netif.ARPFilter).
type ARPFilter interface {
	Set(ranges [][2]netip.Addr) error
}

// Router is route mode on a node: the speaker, and the ARP filter that
// keeps addresses of bgp-only ranges, which live on eipd's device, off the LAN.
type Router struct {
	*Speaker
	Filter ARPFilter
	// Passwords reads the passwords of peers that name a Secret.
	Passwords Passwords

	secrets  secretCache
	filtered [][2]netip.Addr
	applied  bool // filtered is in force; false until the first Set succeeds
}

// Configure sets the ARP filter to the bgp-only ranges of cfg, then
// configures the speaker with the passwords of password-secret peers.
func (r *Router) Configure(cfg config.Config, routerID netip.Addr) error {
	var ranges [][2]netip.Addr
	for _, rg := range cfg.Ranges {
		if rg.Announce == config.AnnounceBGP {
			ranges = append(ranges, [2]netip.Addr{rg.First, rg.Last})
		}
	}
	var errs error
	if !r.applied || !slices.Equal(ranges, r.filtered) {
		if err := r.Filter.Set(ranges); err != nil {
			errs = err
		} else {
			r.filtered, r.applied = ranges, true
		}
	}
	b, err := r.secrets.fill(r.Passwords, cfg.BGP)
	return errors.Join(errs, err, r.Speaker.Configure(b, routerID))
}
