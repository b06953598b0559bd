package bench

import (
	"math"
	"slices"
)

// Summary describes a set of samples.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// Summarize computes the summary of samples. Percentiles are nearest-rank:
// the p-th percentile is the smallest sample with at least p % of the
// samples at or below it, so with fewer than 100 samples the p99 is the
// maximum. The median of an even count is the mean of the middle two.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Sorted(slices.Values(samples))
	n := len(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	median := s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{N: n, Min: s[0], Median: median, P99: Percentile(s, 99), Max: s[n-1], Mean: sum / float64(n)}
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of sorted.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
