package netif

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Tuns are eipd's address devices: Tuns, opened as they are asked for, in
// the network namespace of the first. The kernel walks a device's whole
// list of IPv4 addresses on every address added to it, under the routing
// lock that all network namespaces share: with 5,000 addresses on one
// device an add cost about 0.17 ms, and spread over twenty, about 0.05 ms
// (docs/benchmarks.md). The caller spreads its addresses over them.
//
// It is safe for concurrent use.
type Tuns struct {
	log *slog.Logger

	mu   sync.Mutex
	tuns []*Tun
}

// OpenTuns creates the first device in the calling thread's network
// namespace, so that a node without /dev/net/tun fails at start.
func OpenTuns(log *slog.Logger) (*Tuns, error) {
	first, err := OpenTun(log)
	if err != nil {
		return nil, err
	}
	return &Tuns{log: log, tuns: []*Tun{first}}, nil
}

// Name is the name of the i-th device, opening the devices up to it that
// are not open yet.
func (t *Tuns) Name(i int) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.tuns) <= i {
		ns, err := t.tuns[0].ns.dup()
		if err != nil {
			return "", fmt.Errorf("open tun: %w", err)
		}
		tun, err := openTunIn(t.log, ns)
		if err != nil {
			return "", err
		}
		t.tuns = append(t.tuns, tun)
	}
	return t.tuns[i].Name(), nil
}

// Owns says whether iface is one of the devices.
func (t *Tuns) Owns(iface string) bool {
	return t.find(iface) != nil
}

// Ensure makes device iface exist and be up again after someone deleted
// it or set it down by hand, and says whether it had to (Tun.Ensure).
func (t *Tuns) Ensure(iface string) (bool, error) {
	tun := t.find(iface)
	if tun == nil {
		return false, fmt.Errorf("%s is not one of eipd's devices", iface)
	}
	return tun.Ensure()
}

func (t *Tuns) find(iface string) *Tun {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := slices.IndexFunc(t.tuns, func(tun *Tun) bool { return tun.Name() == iface })
	if i < 0 {
		return nil
	}
	return t.tuns[i]
}

// Close destroys the devices and their addresses.
func (t *Tuns) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, tun := range t.tuns {
		errs = append(errs, tun.Close())
	}
	return errors.Join(errs...)
}
