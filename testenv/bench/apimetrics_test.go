package bench

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

const sampleMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests...
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 120
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="",verb="GET",version="v1"} 99
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="leases",scope="resource",subresource="odd\"quote",verb="GET",version="v1"} 5 1700000000000
apiserver_request_duration_seconds_bucket{resource="leases",verb="PUT",le="0.1"} 1000
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 2.46
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="POST",version="v1"} 0.7
`

func TestParseRequestCounts(t *testing.T) {
	got, err := ParseRequestCounts([]byte(sampleMetrics), "leases")
	assert.NilError(t, err)
	assert.DeepEqual(t, got, RequestCounts{"PUT": 123, "POST": 7, "LIST": 2, "GET": 5})
}

func TestMeanLatency(t *testing.T) {
	got, err := sumByVerb([]byte(sampleMetrics), durationMetric+"_sum", "leases", "")
	assert.NilError(t, err)
	assert.DeepEqual(t, got, map[string]float64{"PUT": 2.46, "POST": 0.7})
	conflicts, err := sumByVerb([]byte(sampleMetrics), requestsMetric, "leases", "409")
	assert.NilError(t, err)
	assert.DeepEqual(t, conflicts, map[string]float64{"PUT": 3})
	before := LeaseMetrics{Requests: RequestCounts{"POST": 10}, Seconds: map[string]float64{"POST": 1}}
	after := LeaseMetrics{Requests: RequestCounts{"POST": 30}, Seconds: map[string]float64{"POST": 3}}
	assert.Equal(t, MeanLatency(before, after, "POST"), 100*time.Millisecond)
	assert.Equal(t, MeanLatency(before, before, "POST"), time.Duration(0))
}

func TestParseRequestCountsRejectsGarbage(t *testing.T) {
	_, err := ParseRequestCounts([]byte(`apiserver_request_total{resource="leases",verb="GET} 1`), "leases")
	assert.ErrorContains(t, err, "unterminated")
	_, err = ParseRequestCounts([]byte(`apiserver_request_total{resource="leases"} x`), "leases")
	assert.ErrorContains(t, err, "value")
}

func TestRatesBetween(t *testing.T) {
	before := RequestCounts{"PUT": 100, "GET": 10, "WATCH": 1}
	after := RequestCounts{"PUT": 160, "POST": 30, "GET": 16, "WATCH": 1}
	r := RatesBetween(before, after, 30*time.Second)
	assert.Equal(t, r.Writes, 3.0)
	assert.Equal(t, r.Reads, 0.2)
	assert.DeepEqual(t, r.ByVerb, map[string]float64{"PUT": 2, "POST": 1, "GET": 0.2})
}
