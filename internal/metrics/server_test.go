package metrics_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/metrics"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHandlerHealthAndReadiness(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	var sent uint64
	m := newMetrics(t, clk, &sent)
	ready := make(chan struct{})
	h := m.Handler(ready, false)

	code, body := get(t, h, "/healthz")
	assert.Equal(t, code, http.StatusOK)
	assert.Equal(t, body, "ok\n")

	code, body = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusServiceUnavailable)
	assert.Equal(t, body, "not ready: agent starting: caches not synced yet\n")

	// Renewing, but the agent has not finished its first pass.
	m.Renewed(time.Millisecond)
	code, _ = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusServiceUnavailable)

	close(ready)
	code, body = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusOK)
	assert.Equal(t, body, "ok\n")

	clk.Step(500 * time.Millisecond)
	m.APIError("renew")
	code, body = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusServiceUnavailable)
	assert.Equal(t, body, "not ready: heartbeat renewal failing since the last success 500ms ago\n")
	code, _ = get(t, h, "/healthz")
	assert.Equal(t, code, http.StatusOK, "liveness must not depend on the API server")

	// Other API errors say nothing about the heartbeat.
	m.Renewed(time.Millisecond)
	m.APIError("acquire")
	code, _ = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusOK)

	// Renewing, but with no valid configuration in force: not ready, and
	// alive.
	m.NotServing("no valid configuration")
	code, body = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusServiceUnavailable)
	assert.Equal(t, body, "not ready: would not take over the IPs it should: no valid configuration\n")
	code, _ = get(t, h, "/healthz")
	assert.Equal(t, code, http.StatusOK)
	m.NotServing("")
	code, _ = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusOK)

	// A heartbeat that silently stops (a stuck loop) turns unready too.
	clk.Step(10 * time.Second)
	code, body = get(t, h, "/readyz")
	assert.Equal(t, code, http.StatusServiceUnavailable)
	assert.Equal(t, body, "not ready: heartbeat not renewed for 10s (limit 5s)\n")
}

func TestHandlerMetrics(t *testing.T) {
	var sent uint64 = 42
	m := newMetrics(t, clocktesting.NewFakeClock(time.Now()), &sent)
	m.Held(5)
	code, body := get(t, m.Handler(make(chan struct{}), false), "/metrics")
	assert.Equal(t, code, http.StatusOK)
	assert.Check(t, is.Contains(body, "\neip_ips_held 5\n"))
	assert.Check(t, is.Contains(body, "\neip_announcements_sent_total 42\n"))
	assert.Check(t, is.Contains(body, "\ngo_goroutines "))
}

func TestHandlerPprofOnlyWhenAsked(t *testing.T) {
	var sent uint64
	m := newMetrics(t, clocktesting.NewFakeClock(time.Now()), &sent)
	code, _ := get(t, m.Handler(nil, false), "/debug/pprof/")
	assert.Equal(t, code, http.StatusNotFound)

	h := m.Handler(nil, true)
	code, body := get(t, h, "/debug/pprof/")
	assert.Equal(t, code, http.StatusOK)
	assert.Check(t, is.Contains(body, "goroutine"))
	code, body = get(t, h, "/debug/pprof/goroutine?debug=1")
	assert.Equal(t, code, http.StatusOK)
	assert.Check(t, is.Contains(body, "goroutine profile"))
	code, _ = get(t, h, "/debug/pprof/cmdline")
	assert.Equal(t, code, http.StatusOK)
}

func TestServerServesUntilClosed(t *testing.T) {
	var sent uint64
	m := newMetrics(t, clocktesting.NewFakeClock(time.Now()), &sent)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := metrics.Start("127.0.0.1:0", m.Handler(nil, false), log)
	assert.NilError(t, err)
	url := "http://" + srv.Addr().String()

	resp, err := http.Get(url + "/healthz")
	assert.NilError(t, err)
	body, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	assert.NilError(t, resp.Body.Close())
	assert.Equal(t, resp.StatusCode, http.StatusOK)
	assert.Equal(t, string(body), "ok\n")

	// The port is taken while the server runs: a second eipd fails at once.
	_, err = metrics.Start(srv.Addr().String(), m.Handler(nil, false), log)
	assert.ErrorContains(t, err, "listen on "+srv.Addr().String())

	assert.NilError(t, srv.Close())
	_, err = net.DialTimeout("tcp", srv.Addr().String(), time.Second)
	assert.Assert(t, err != nil, "still listening after Close")
}
