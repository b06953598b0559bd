package wire

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestReportRoundTrip(t *testing.T) {
	since := time.Unix(1765000000, 0)
	r := Report{Heard: true, Entries: map[netip.Addr]Entry{
		netip.MustParseAddr("198.18.0.11"): {Verdict: Stranger, MACs: []string{"02:00:00:00:00:99"}, Since: since},
		netip.MustParseAddr("198.18.0.10"): {Verdict: NoAnswer, Since: since},
		netip.MustParseAddr("2001:db8::5"): {Verdict: TwoMACs, MACs: []string{"02:00:00:00:00:01", "02:00:00:00:00:99"}, Since: since},
	}}
	text := r.Format()
	assert.Equal(t, text, "198.18.0.10=none@1765000000,198.18.0.11=stranger/02:00:00:00:00:99@1765000000,"+
		"2001:db8::5=two-macs/02:00:00:00:00:01+02:00:00:00:00:99@1765000000")
	got, err := ParseReport(text)
	assert.NilError(t, err)
	assert.DeepEqual(t, got, r)

	deaf := Report{}
	assert.Equal(t, deaf.Format(), "deaf")
	got, err = ParseReport("deaf")
	assert.NilError(t, err)
	assert.DeepEqual(t, got, deaf)

	got, err = ParseReport("")
	assert.NilError(t, err)
	assert.DeepEqual(t, got, Report{Heard: true})
}

func TestReportBounded(t *testing.T) {
	r := Report{Heard: true, Entries: map[netip.Addr]Entry{}}
	for i := range maxEntries + 10 {
		r.Entries[netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})] = Entry{Verdict: NoAnswer, Since: time.Unix(1, 0)}
	}
	got, err := ParseReport(r.Format())
	assert.NilError(t, err)
	assert.Equal(t, len(got.Entries), maxEntries)
	assert.Equal(t, got.More, 10)
	_, kept := got.Entries[netip.AddrFrom4([4]byte{198, 18, 1, 0})]
	assert.Assert(t, kept, "the lowest IPs are kept")
}

func TestParseReportRejects(t *testing.T) {
	for _, bad := range []string{
		"198.18.0.10", "198.18.0.10=none", "nonsense=none@1", "198.18.0.10=maybe@1",
		"198.18.0.10=none@soon", "198.18.0.10=stranger/zz@1", "more=-1", "more=x",
	} {
		t.Run(bad, func(t *testing.T) {
			_, err := ParseReport("198.18.0.1=none@5," + bad)
			assert.ErrorContains(t, err, fmt.Sprintf("%q", bad))
		})
	}
}
