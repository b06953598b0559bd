package wire

import (
	"testing"

	"gotest.tools/v3/assert"
)

func TestJudge(t *testing.T) {
	const (
		h1 = "02:00:00:00:00:01"
		h2 = "02:00:00:00:00:02"
		x  = "02:00:00:00:00:99"
		y  = "02:00:00:00:00:98"
	)
	holder := []string{h1, h2}
	for _, tc := range []struct {
		name     string
		answered []string
		want     Verdict
	}{
		{"nobody", nil, NoAnswer},
		{"the holder", []string{h1}, Holder},
		{"the holder from both its interfaces", []string{h1, h2}, Holder},
		{"a stranger", []string{x}, Stranger},
		{"the holder and a stranger", []string{h1, x}, TwoMACs},
		{"a stranger and the holder", []string{x, h2}, TwoMACs},
		{"two strangers", []string{x, y}, TwoMACs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, Judge(holder, tc.answered), tc.want)
		})
	}
	assert.Equal(t, Judge(nil, []string{h1}), Stranger, "a holder that publishes no MAC is not believed")
}

func TestVerdictNames(t *testing.T) {
	for v := Unchecked; v <= TwoMACs; v++ {
		got, ok := ParseVerdict(v.String())
		assert.Assert(t, ok, v)
		assert.Equal(t, got, v)
	}
	_, ok := ParseVerdict("maybe")
	assert.Assert(t, !ok)
	assert.Equal(t, Verdict(42).String(), "unknown")
}
