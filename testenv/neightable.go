package testenv

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The kernel keeps one neighbour table per address family for the whole
// machine: the entries of every network namespace count against the same
// gc_thresh3. On a real cluster each node has a table of its own; here
// fifty node namespaces that all talk to each other share it, and when it
// is full the kernel drops what it cannot resolve ("neighbor table
// overflow!"): datagrams between nodes and the client's pings are lost
// for the test bed's sake, not eip's.

// neighFamilies are the sysctl prefixes of the two neighbour tables.
var neighFamilies = []string{"net.ipv4.neigh.default.", "net.ipv6.neigh.default."}

// NeighEntries estimates how many neighbour entries, per address family, a
// cluster needs at most: every endpoint on the LAN (the nodes, the control
// plane and the client, with the router if any) may resolve every other,
// and the client resolves each Service IP it reaches.
func NeighEntries(endpoints, serviceIPs int) int {
	return endpoints*(endpoints-1) + serviceIPs
}

// neighLimits are the gc thresholds the kernel's neighbour tables need
// for need entries, and leave alone when they already allow it: the hard
// limit twice the need, and the soft one, above which the kernel soon
// drops entries not used recently, the need itself.
func neighLimits(need int) map[string]int {
	return map[string]int{"gc_thresh2": need, "gc_thresh3": 2 * need}
}

// neighChange is one threshold raised for a run.
type neighChange struct {
	key      string
	from, to int
}

// raiseNeighLimits raises the machine's neighbour table thresholds of both
// families to what need entries take, where they are lower, and returns
// what it changed. On an error it has restored what it raised.
func raiseNeighLimits(need int) ([]neighChange, error) {
	var done []neighChange
	for _, fam := range neighFamilies {
		for _, k := range []string{"gc_thresh2", "gc_thresh3"} {
			key := fam + k
			cur, err := readSysctlInt(key)
			if err != nil {
				return nil, errors.Join(err, restoreNeighLimits(done))
			}
			want := neighLimits(need)[k]
			if cur >= want {
				continue
			}
			if err := writeSysctlInt(key, want); err != nil {
				return nil, errors.Join(err, restoreNeighLimits(done))
			}
			done = append(done, neighChange{key: key, from: cur, to: want})
		}
	}
	return done, nil
}

// restoreNeighLimits puts back what raiseNeighLimits changed, in reverse,
// unless someone set another value meanwhile: that one is left.
func restoreNeighLimits(changes []neighChange) error {
	var errs error
	for i := len(changes) - 1; i >= 0; i-- {
		ch := changes[i]
		cur, err := readSysctlInt(ch.key)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		if cur != ch.to {
			errs = errors.Join(errs, fmt.Errorf("sysctl %s is %d, not the %d set for the run: left as it is (it was %d)", ch.key, cur, ch.to, ch.from))
			continue
		}
		errs = errors.Join(errs, writeSysctlInt(ch.key, ch.from))
	}
	return errs
}

// describeNeighChanges says what was changed, for logs and results.
func describeNeighChanges(need int, changes []neighChange) string {
	if len(changes) == 0 {
		return ""
	}
	parts := make([]string, len(changes))
	for i, ch := range changes {
		parts[i] = fmt.Sprintf("%s %d → %d", ch.key, ch.from, ch.to)
	}
	return fmt.Sprintf("up to %d neighbour entries per family needed; raised for the run: %s", need, strings.Join(parts, ", "))
}

func sysctlPath(key string) string {
	return "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

func readSysctlInt(key string) (int, error) {
	b, err := os.ReadFile(sysctlPath(key))
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", key, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", key, err)
	}
	return n, nil
}

func writeSysctlInt(key string, v int) error {
	if err := os.WriteFile(sysctlPath(key), []byte(strconv.Itoa(v)), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%d: %w", key, v, err)
	}
	return nil
}
