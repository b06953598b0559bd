package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The ConfigMap keys.
const (
	keyIface          = "iface"
	keyNetmask        = "netmask"
	keyNetmask6       = "netmask6"
	keyPolicy         = "policy"
	keyNodeSelector   = "node-selector"
	keyLeaseDuration  = "lease-duration"
	keyRenewInterval  = "renew-interval"
	keyAPILoss        = "api-loss"
	keyFenceAfter     = "fence-after"
	keyLivenessPort   = "liveness-port"
	keyHBWrites       = "heartbeat-writes"
	keyAnnounceEvery  = "announce-interval"
	keyPreferredNodes = "preferred-nodes"
	keyExternalIPs    = "external-ips"
	keyPortFilter     = "port-filter"
	keyPerService     = "max-ips-per-service"
	keyPerNamespace   = "max-ips-per-namespace"
	keyClass          = "load-balancer-class"
	keyRanges         = "ranges"
)

// Bounds of the durations, with the reason an operator is told.
const (
	minLease = time.Second
	maxLease = time.Hour
	minRenew = 100 * time.Millisecond
)

// A Key is a ConfigMap key Parse understands, with the value it takes
// when the key is missing or empty, written as the ConfigMap would hold it
// with every other key at its default; "" when the default is to have
// none (no ranges, no BGP peers, every node).
type Key struct {
	Name    string
	Default string
}

// Reference returns the keys Parse understands, in the order it reads
// them, with their defaults. Parsing any of these defaults gives Default(),
// and docs/configuration.md is tested against this table, so that neither
// can drift from the parser.
func Reference() []Key {
	return []Key{
		{keyIface, "auto"},
		{keyNetmask, "32"},
		{keyNetmask6, "128"},
		{keyPolicy, string(PolicySticky)},
		{keyNodeSelector, ""},
		{keyLeaseDuration, "2s"},
		{keyRenewInterval, "500ms"},
		{keyAPILoss, string(APILossHold)},
		{keyFenceAfter, "1500ms"},
		{keyLivenessPort, strconv.Itoa(DefaultLivenessPort)},
		{keyHBWrites, strconv.Itoa(DefaultHeartbeatWrites)},
		{keyAnnounceEvery, "off"},
		{keyExternalIPs, "on"},
		{keyPortFilter, "on"},
		{keyPerService, strconv.Itoa(DefaultMaxIPsPerService)},
		{keyPerNamespace, "off"},
		{keyClass, string(ClassAny)},
		{keyPreferredNodes, ""},
		{keyRanges, ""},
		{keyBGPASN, ""},
		{keyBGPRouterID, ""},
		{keyBGPPeers, ""},
	}
}

// Keys returns the names of the keys Parse understands, in the order it
// reads them.
func Keys() []string {
	ref := Reference()
	names := make([]string, len(ref))
	for i, k := range ref {
		names[i] = k.Name
	}
	return names
}

// Parse validates data, the ConfigMap's .data, and returns the Config it
// describes. On failure the error names each offending key, says what is
// wrong and what is accepted (several errors are joined with errors.Join),
// and the returned Config holds only Warnings, which may explain the error
// (a misspelt key). Empty or missing data gives Default().
func Parse(data map[string]string) (Config, error) {
	c := Default()
	value := func(key string) (string, bool) {
		v := strings.TrimSpace(data[key])
		return v, v != ""
	}
	var errs error
	bad := func(key, v string, err error) {
		errs = errors.Join(errs, fmt.Errorf("%s %q %w", key, v, err))
	}

	if v, ok := value(keyIface); ok {
		if err := checkIface(v); err != nil {
			bad(keyIface, v, err)
		} else {
			c.Iface = v
		}
	}
	if v, ok := value(keyNetmask); ok {
		if n, err := parseBits(v, true); err != nil {
			bad(keyNetmask, v, err)
		} else {
			c.Netmask4 = n
		}
	}
	if v, ok := value(keyNetmask6); ok {
		if n, err := parseBits(v, false); err != nil {
			bad(keyNetmask6, v, err)
		} else {
			c.Netmask6 = n
		}
	}
	if v, ok := value(keyPolicy); ok {
		switch p := Policy(v); p {
		case PolicySticky, PolicySpread:
			c.Policy = p
		default:
			bad(keyPolicy, v, fmt.Errorf("is not a policy: use %q or %q", PolicySticky, PolicySpread))
		}
	}
	if v, ok := value(keyNodeSelector); ok {
		if s, err := labels.Parse(v); err != nil {
			bad(keyNodeSelector, v, fmt.Errorf("is not a label selector (%w): use kubectl syntax such as \"zone=a,!no-eip\"", err))
		} else {
			c.NodeSelector = s
		}
	}
	if v, ok := value(keyAPILoss); ok {
		switch a := APILoss(v); a {
		case APILossHold, APILossFence:
			c.APILoss = a
		default:
			bad(keyAPILoss, v, fmt.Errorf("is not supported: use %q or %q", APILossHold, APILossFence))
		}
	}
	errs = errors.Join(errs, c.parseDurations(value))
	if v, ok := value(keyLivenessPort); ok {
		if p, err := parseLivenessPort(v); err != nil {
			bad(keyLivenessPort, v, err)
		} else {
			c.LivenessPort = p
		}
	}
	if v, ok := value(keyHBWrites); ok {
		if w, err := parseHeartbeatWrites(v); err != nil {
			bad(keyHBWrites, v, err)
		} else {
			c.HeartbeatWrites = w
		}
	}
	if v, ok := value(keyAnnounceEvery); ok {
		if d, err := parseAnnounceInterval(v); err != nil {
			bad(keyAnnounceEvery, v, err)
		} else {
			c.AnnounceInterval = d
		}
	}
	if v, ok := value(keyExternalIPs); ok {
		if on, isSwitch := parseSwitch(v); isSwitch {
			c.ExternalIPs = on
		} else {
			bad(keyExternalIPs, v, errors.New(`is not a switch: use "on" (spec.externalIPs and LoadBalancer addresses) or "off" (LoadBalancer addresses only)`))
		}
	}
	if v, ok := value(keyPortFilter); ok {
		if on, isSwitch := parseSwitch(v); isSwitch {
			c.PortFilter = on
		} else {
			bad(keyPortFilter, v, errors.New(`is not a switch: use "on" (an external IP opens only its Services' ports) or "off" (every port of the node)`))
		}
	}
	for _, k := range [...]struct {
		name string
		cap  *int
	}{{keyPerService, &c.Caps.PerService}, {keyPerNamespace, &c.Caps.PerNamespace}} {
		if v, ok := value(k.name); ok {
			if n, err := parseCap(v); err != nil {
				bad(k.name, v, err)
			} else {
				*k.cap = n
			}
		}
	}
	if v, ok := value(keyClass); ok {
		switch m := ClassMode(v); m {
		case ClassAny, ClassOnly:
			c.LoadBalancerClass = m
		default:
			bad(keyClass, v, fmt.Errorf(`is not supported: use %q (LoadBalancer Services without a class and those of class eip.io/eip) or %q (class eip.io/eip only)`, ClassAny, ClassOnly))
		}
	}
	if v, ok := value(keyPreferredNodes); ok {
		errs = errors.Join(errs, c.parsePreferredNodes(v))
	}
	if _, ok := value(keyRanges); ok {
		// Untrimmed, so that line numbers match what the operator sees.
		rs, err := parseRanges(data[keyRanges], c)
		errs = errors.Join(errs, err)
		c.Ranges = rs
	}
	if err := c.parseBGP(value, data[keyBGPPeers]); err != nil {
		errs = errors.Join(errs, err)
	} else {
		errs = errors.Join(errs, c.checkRouteRanges())
	}

	known := Keys()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		if !slices.Contains(known, k) {
			c.Warnings = append(c.Warnings, fmt.Sprintf("unknown key %q ignored%s", k, didYouMean(k, known)))
		}
	}
	if _, set := value(keyFenceAfter); set && c.APILoss != APILossFence {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s has no effect unless %s is %q", keyFenceAfter, keyAPILoss, APILossFence))
	}
	if _, set := value(keyLivenessPort); set && c.LivenessPort != 0 && c.APILoss == APILossFence {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s has no effect with %s %q: fencing is timed against heartbeats renewed every renew-interval, so liveness is judged from them alone",
			keyLivenessPort, keyAPILoss, APILossFence))
	}
	if _, set := value(keyHBWrites); set && !c.LANLiveness() {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s has no effect without liveness over the LAN (%s off, or %s %q): every heartbeat is renewed every renew-interval",
			keyHBWrites, keyLivenessPort, keyAPILoss, APILossFence))
	}
	if errs != nil {
		return Config{Warnings: c.Warnings}, errs
	}
	return c, nil
}

// parseDurations reads lease-duration, renew-interval and fence-after and
// checks them against each other.
func (c *Config) parseDurations(value func(string) (string, bool)) error {
	var errs error
	read := func(key string, dst *time.Duration) (text string, ok bool) {
		v, set := value(key)
		if !set {
			return fmt.Sprint(*dst), true
		}
		d, err := parseDuration(v)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s %q %w", key, v, err))
			return v, false
		}
		*dst = d
		return v, true
	}
	lease, leaseOK := read(keyLeaseDuration, &c.LeaseDuration)
	if _, set := value(keyFenceAfter); !set {
		c.FenceAfter = defaultFenceAfter(c.LeaseDuration)
	}
	renew, renewOK := read(keyRenewInterval, &c.RenewInterval)
	fence, fenceOK := read(keyFenceAfter, &c.FenceAfter)

	if leaseOK {
		switch {
		case c.LeaseDuration < minLease:
			errs = errors.Join(errs, fmt.Errorf("%s %q must be at least %v: bound addresses live whole seconds in the kernel and must expire before peers take over",
				keyLeaseDuration, lease, minLease))
			leaseOK = false
		case c.LeaseDuration > maxLease:
			errs = errors.Join(errs, fmt.Errorf("%s %q must be at most %v: it is how long IPs of a dead node stay unanswered",
				keyLeaseDuration, lease, maxLease))
			leaseOK = false
		}
	}
	if renewOK && c.RenewInterval < minRenew {
		errs = errors.Join(errs, fmt.Errorf("%s %q must be at least %v: every node writes its heartbeat once per renew-interval",
			keyRenewInterval, renew, minRenew))
		renewOK = false
	}
	if leaseOK && renewOK && c.RenewInterval > c.LeaseDuration/2 {
		if c.RenewInterval >= c.LeaseDuration {
			errs = errors.Join(errs, fmt.Errorf("%s %q must be shorter than %s %q: at most half of it, so that one late renewal does not make a live node look dead",
				keyRenewInterval, renew, keyLeaseDuration, lease))
		} else {
			errs = errors.Join(errs, fmt.Errorf("%s %q must be at most half of %s %q, so that one late renewal does not make a live node look dead",
				keyRenewInterval, renew, keyLeaseDuration, lease))
		}
	}
	// The default fence-after, 3/4 of lease-duration, always fits when the
	// other two do; judging it against a bad renew-interval would only add noise.
	_, fenceSet := value(keyFenceAfter)
	fenceOK = fenceOK && fenceSet
	if fenceOK && leaseOK && c.FenceAfter >= c.LeaseDuration {
		errs = errors.Join(errs, fmt.Errorf("%s %q must be shorter than %s %q: a fencing node must unbind before peers may take its IPs over",
			keyFenceAfter, fence, keyLeaseDuration, lease))
	}
	if fenceOK && renewOK && c.FenceAfter <= c.RenewInterval {
		errs = errors.Join(errs, fmt.Errorf("%s %q must be longer than %s %q: otherwise a healthy node fences between two renewals",
			keyFenceAfter, fence, keyRenewInterval, renew))
	}
	return errs
}

// parsePreferredNodes reads node names separated by commas or whitespace.
// A repeated name is dropped with a warning: only its first place counts.
func (c *Config) parsePreferredNodes(v string) error {
	names, repeated, err := nodeNames(v, keyPreferredNodes)
	for _, n := range repeated {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s lists %q more than once; its first place counts", keyPreferredNodes, n))
	}
	c.PreferredNodes = names
	return err
}

// ParsePreferredNodes reads a list of preferred nodes written as the
// preferred-nodes key takes it (names separated by commas or whitespace),
// the value of what (such as an annotation). A repeated name keeps its
// first place. The error names every name that is not a node name, one
// line each, starting with what.
func ParsePreferredNodes(v, what string) ([]string, error) {
	names, _, err := nodeNames(v, what)
	return names, err
}

// nodeNames splits v, the value of what, at commas and whitespace into
// node names (DNS subdomains), in order, without repeats, which it
// returns apart.
func nodeNames(v, what string) (names, repeated []string, err error) {
	for _, n := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || strings.ContainsRune(" \t\r\n", r) }) {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			err = errors.Join(err, fmt.Errorf("%s: %q is not a node name: %s", what, n, strings.Join(msgs, "; ")))
			continue
		}
		if slices.Contains(names, n) {
			repeated = append(repeated, n)
			continue
		}
		names = append(names, n)
	}
	return names, repeated, err
}

// Bounds of heartbeat-writes.
const (
	minHBWrites = 0.1
	maxHBWrites = 1000.0
)

// parseHeartbeatWrites reads heartbeat-writes: a number of writes a second,
// from minHBWrites to maxHBWrites.
func parseHeartbeatWrites(v string) (float64, error) {
	w, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(w) || w < minHBWrites || w > maxHBWrites {
		return 0, fmt.Errorf("is not a number of writes a second from %g to %g (fewer writes make `kubectl eip status` show a dead node alive longer)", minHBWrites, maxHBWrites)
	}
	return w, nil
}

// Bounds of announce-interval: below a few seconds the re-announcements
// would be most of what eipd sends (10,000 IPs every 10 s is 1,000
// announcements a second); above an hour they would refresh no router's
// cache in time.
const (
	minAnnounceEvery = 10 * time.Second
	maxAnnounceEvery = time.Hour
)

// parseAnnounceInterval reads announce-interval: "off" (also "0"), or a
// duration from minAnnounceEvery to maxAnnounceEvery.
func parseAnnounceInterval(v string) (time.Duration, error) {
	if v == "off" || v == "0" {
		return 0, nil
	}
	d, err := parseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w, or \"off\"", err)
	case d < minAnnounceEvery:
		return 0, fmt.Errorf("must be at least %v: each held IP is announced again once per interval, and a shorter one floods the LAN", minAnnounceEvery)
	case d > maxAnnounceEvery:
		return 0, fmt.Errorf("must be at most %v: a router that forgets an entry sooner would not be refreshed in time", maxAnnounceEvery)
	}
	return d, nil
}

// parseLivenessPort reads liveness-port: a UDP port from 1024 to 65535, or
// "off" (also "0") for liveness judged from heartbeat Leases alone.
func parseLivenessPort(v string) (uint16, error) {
	if v == "off" || v == "0" {
		return 0, nil
	}
	p, err := strconv.ParseUint(v, 10, 16)
	if err != nil || p < 1024 {
		return 0, errors.New(`is not a port: use a UDP port from 1024 to 65535 (eipd binds it without privileges), or "off"`)
	}
	return uint16(p), nil
}

// parseSwitch reads "on" or "off"; isSwitch is false for anything else.
func parseSwitch(v string) (on, isSwitch bool) {
	switch v {
	case "on":
		return true, true
	case "off":
		return false, true
	}
	return false, false
}
