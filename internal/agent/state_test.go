package agent

import (
	"maps"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

// A peer's renewal changes no verdict, so it needs no reconcile pass; a
// change of its status, a new node and an expiry do.
func TestVerdictsIgnoreRenewals(t *testing.T) {
	const renew, duration = 500 * time.Millisecond, 2 * time.Second
	t0 := time.Unix(1_000_000, 0)
	s := &state{live: lease.NewLiveness("node-a", renew, 2*renew)}
	version := 0
	renewAt := func(node string, at time.Time, eligible bool) {
		version++
		s.live.Observe(lease.Heartbeat{Node: node, Duration: duration, RenewTime: at, Eligible: eligible, Held: 3, Version: strconv.Itoa(version)}, at)
	}
	renewAt("node-a", t0, true)
	renewAt("node-b", t0, true)

	now := t0.Add(renew)
	before := verdictsOf(s.live, now)
	renewAt("node-a", now, true)
	renewAt("node-b", now, true)
	assert.Check(t, maps.Equal(before, verdictsOf(s.live, now)), "a renewal changed a verdict: %v → %v", before, verdictsOf(s.live, now))

	now = now.Add(renew)
	before = verdictsOf(s.live, now)
	renewAt("node-b", now, false)
	assert.Check(t, !maps.Equal(before, verdictsOf(s.live, now)), "node-b becoming ineligible changed no verdict")

	before = verdictsOf(s.live, now)
	renewAt("node-c", now, true)
	assert.Check(t, !maps.Equal(before, verdictsOf(s.live, now)), "a new node changed no verdict")

	// node-b stops renewing while node-a's renewals keep the stream fresh:
	// a lease duration later it is dead.
	before = verdictsOf(s.live, now)
	for range int(duration / renew) {
		now = now.Add(renew)
		renewAt("node-a", now, true)
		renewAt("node-c", now, true)
	}
	after := verdictsOf(s.live, now)
	assert.Check(t, before["node-b"].alive && !after["node-b"].alive, "node-b: %v → %v", before["node-b"], after["node-b"])
	assert.Check(t, after["node-c"].alive && after["node-c"].renewing)
}

// snapshot returns what puts s back as it is now. Every map and slice of
// the state and of its parts is copied, so a check that runs a pass on the
// live state and then restores it leaks nothing into the loop's memory,
// whatever field a later change adds.
func snapshot(s *state) (restore func()) {
	saved := *s
	copyContainers(reflect.ValueOf(&saved).Elem())
	return func() { *s = saved }
}

// copyContainers replaces, in the struct v, every map and slice by a copy,
// descending into the structs it holds by value.
func copyContainers(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		switch f.Kind() {
		case reflect.Map:
			if !f.IsNil() {
				m := reflect.MakeMapWithSize(f.Type(), f.Len())
				for it := f.MapRange(); it.Next(); {
					m.SetMapIndex(it.Key(), it.Value())
				}
				f.Set(m)
			}
		case reflect.Slice:
			if !f.IsNil() {
				c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
				reflect.Copy(c, f)
				f.Set(c)
			}
		case reflect.Struct:
			copyContainers(f)
		}
	}
}
