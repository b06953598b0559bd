package bench

import (
	"testing"

	"gotest.tools/v3/assert"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []float64
		want    Summary
	}{
		{"none", nil, Summary{}},
		{"one", []float64{3}, Summary{N: 1, Min: 3, Median: 3, P99: 3, Max: 3, Mean: 3}},
		{"odd, unsorted", []float64{5, 1, 3}, Summary{N: 3, Min: 1, Median: 3, P99: 5, Max: 5, Mean: 3}},
		{"even: mean of the middle two", []float64{4, 1, 2, 3}, Summary{N: 4, Min: 1, Median: 2.5, P99: 4, Max: 4, Mean: 2.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.DeepEqual(t, Summarize(tc.samples), tc.want)
		})
	}
}

func TestPercentileNearestRank(t *testing.T) {
	var s []float64
	for i := 1; i <= 200; i++ {
		s = append(s, float64(i))
	}
	assert.Equal(t, Percentile(s, 99), 198.0)
	assert.Equal(t, Percentile(s, 50), 100.0)
	assert.Equal(t, Percentile(s, 100), 200.0)
	assert.Equal(t, Percentile(s[:20], 99), 20.0, "below 100 samples the p99 is the maximum")
	assert.Equal(t, Percentile(nil, 99), 0.0)
}
