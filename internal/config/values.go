package config

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
)

const durationHelp = `use a Go duration such as "2s" or "1500ms", or seconds such as "2"`

// parseDuration reads a Go duration or a plain number of seconds and
// requires a positive result.
func parseDuration(s string) (time.Duration, error) {
	text := s
	if plainNumber(s) {
		text += "s"
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("is not a duration: %s", durationHelp)
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

// plainNumber reports whether s is digits with at most one decimal point.
func plainNumber(s string) bool {
	digits, dots := 0, 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// parseBits reads a prefix length ("24", "/24") for the family of is4, or for
// IPv4 also a dotted mask ("255.255.255.0"). IPv4 lengths run from 8 to 32
// (anything shorter is surely a mistake on a LAN), IPv6 from 1 to 128.
func parseBits(s string, is4 bool) (int, error) {
	lo, hi, help := 1, 128, "use a prefix length from 1 to 128"
	if is4 {
		lo, hi, help = 8, 32, `use a prefix length from 8 to 32 or a dotted mask such as "255.255.255.0"`
	}
	if is4 && strings.Contains(s, ".") {
		m, err := netip.ParseAddr(s)
		if err != nil || !m.Is4() {
			return 0, fmt.Errorf("is not a netmask: %s", help)
		}
		a := m.As4()
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		if inv := ^v; inv&(inv+1) != 0 {
			return 0, fmt.Errorf("is not a contiguous netmask: %s", help)
		}
		s = strconv.Itoa(bits.OnesCount32(v))
	}
	n, err := strconv.Atoi(strings.TrimPrefix(s, "/"))
	if err != nil {
		return 0, fmt.Errorf("is not a netmask: %s", help)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("is out of range: %s", help)
	}
	return n, nil
}

// checkIface accepts "auto" or a name Linux would accept for a link
// (dev_valid_name: at most 15 bytes, not "." or "..", no '/', ':' or
// whitespace).
func checkIface(s string) error {
	const help = `use an interface name of at most 15 bytes without '/', ':' or spaces, or "auto"`
	switch {
	case s == "auto":
		return nil
	case len(s) > 15:
		return fmt.Errorf("is longer than 15 bytes: %s", help)
	case s == "." || s == "..":
		return fmt.Errorf("is not an interface name: %s", help)
	case strings.ContainsFunc(s, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) }):
		return fmt.Errorf("contains '/', ':' or a space: %s", help)
	}
	return nil
}

// suggest returns the candidate that word most likely misspells, or "".
// Case, '-' and '_' are ignored, so "leaseDuration" suggests "lease-duration".
func suggest(word string, candidates []string) string {
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '-' || r == '_' {
				return -1
			}
			return unicode.ToLower(r)
		}, s)
	}
	w := norm(word)
	best, bestDist := "", 3 // at most two edits away
	for _, c := range candidates {
		if d := editDistance(w, norm(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// didYouMean formats a suggestion for word, or returns "".
func didYouMean(word string, candidates []string) string {
	if s := suggest(word, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// MaxCap is the highest cap of addresses max-ips-per-service and
// max-ips-per-namespace take.
const MaxCap = 1_000_000

// parseCap reads a cap of addresses: a count from 1 to MaxCap, or "off"
// (0: no cap).
func parseCap(v string) (int, error) {
	if v == "off" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || len(v) > 7 || strings.Trim(v, "0123456789") != "" || n < 1 || n > MaxCap {
		return 0, fmt.Errorf(`is not a number of addresses: use a count from 1 to %d, or "off"`, MaxCap)
	}
	return n, nil
}
