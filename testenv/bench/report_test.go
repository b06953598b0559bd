package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/golden"
)

// sampleReport is a small report with every kind of sample.
func sampleReport() *Report {
	ms := time.Millisecond
	r := &Report{
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Took:    14 * time.Minute,
		Nodes:   3,
		Timings: []Timing{defaultTiming, tunedTiming},
		Machine: Machine{CPU: "Test CPU", CPUs: 2, MemoryMiB: 4096, Kernel: "Linux 6.1 x86_64", GoVersion: "go1.26", LoadStart: "1.00 1.00 1.00", LoadEnd: "2.00 2.00 2.00"},
		Failover: []FailoverSample{
			{Fault: FaultKill, Timing: "lease 2s", Failover: 1800 * ms, AnswerARP: []string{"node-2"}},
			{Fault: FaultKill, Timing: "lease 2s", Failover: 2100 * ms, AnswerARP: []string{"node-3"}},
			{Fault: FaultCut, Timing: "lease 2s", Failover: 2600 * ms, AnswerARP: []string{"node-1", "node-2"}},
			{Fault: FaultCut, Timing: "lease 2s", Error: "wait for a reply from another node: not within 1m0s"},
			{Fault: FaultKill, Timing: "lease 1s", Failover: 1100 * ms, DoubleBound: 20 * ms, AnswerARP: []string{"node-1"}},
			{Fault: FaultKill, Timing: "lease 1s", Failover: 1200 * ms},
		},
		Moves: []MoveSample{
			{Kind: MoveRequest, Method: viaAnnotation, Gap: 30 * ms},
			{Kind: MoveSIGTERM, Gap: 150 * ms, TwoMACs: 1},
		},
		MoveMethod: viaAnnotation,
		Bind:       []BindSample{{Latency: 40 * ms}, {Latency: 60 * ms}, {Latency: 500 * ms}},
		Load: []ScaleResult{
			{IPs: 10, Steady: Rates{Window: 30 * time.Second, Writes: 6.1, Reads: 0.1}},
			{IPs: 2000, Steady: Rates{Window: 30 * time.Second, Writes: 6.4}},
		},
		Scale: []ScaleResult{{
			IPs: 1000, ColdStart: 4 * time.Second, Steady: Rates{Window: 30 * time.Second, Writes: 6.15},
			LeaseRate: &LeaseRate{Leases: 1000, Tries: map[int]float64{4: 500, 8: 1000}, Best: 1000, Creators: 8,
				TryCPU: map[int]CPUAccount{8: {Wall: time.Second, CPUs: 2, Busy: 1800 * ms,
					Processes: map[string]time.Duration{procAPIServer: 900 * ms, procEtcd: 300 * ms, procBench: 500 * ms}}}},
			ColdStartCPU: &CPUAccount{Wall: 4 * time.Second, CPUs: 2, Busy: 7600 * ms,
				Processes: map[string]time.Duration{procAPIServer: 2400 * ms, procEtcd: 600 * ms, procBench: 800 * ms, "node-1": 1200 * ms, "node-2": 1300 * ms, "node-3": 1100 * ms}},
			Progress:   []Point{{0, 0}, {2, 500}, {4, 1000}},
			Daemons:    []DaemonStats{{Node: "node-1", PeakRSS: 40 << 20, CPU: 3}, {Node: "node-2", PeakRSS: 70 << 20, CPU: 5}},
			StatusNote: "kubectl-eip has no status command yet",
		}, {
			IPs: 1000, CPUQuota: 10, ColdStart: 9 * time.Second, Vanished: 3, Steady: Rates{Window: 30 * time.Second, Writes: 6.2},
			Daemons: []DaemonStats{{Node: "node-1", PeakRSS: 40 << 20, CPU: 10}},
			Logged:  map[string]LogCounts{"node-1": {Unheard: 2, Unbound: 40}, "node-2": {}},
		}},
		PluginNote: "no kubectl-eip binary (KUBECTL_EIP_BIN)",
		Background: &Rates{Window: 30 * time.Second, Writes: 0.1},
	}
	r.Figures = r.figures()
	return r
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	assert.NilError(t, sampleReport().WriteTable(&b))
	golden.Assert(t, b.String(), "table.golden")
}

func TestVerdicts(t *testing.T) {
	got := map[string]string{}
	for _, f := range sampleReport().Figures {
		got[f.Name] = f.verdict()
	}
	assert.Equal(t, got["failover, eipd SIGKILLed, lease 2s"], "yes")
	assert.Equal(t, got["failover, holder's link cut, lease 2s"], "NO", "2.6 s > 2.5 s")
	assert.Equal(t, got["Service created → IP answering pings"], "yes", "the median, not the outlier")
	assert.Equal(t, got[nameTwoMACs], "NO", "an overlap in a SIGTERM and two ARP answers")
	assert.Equal(t, got[nameDoubleBound], "NO")
	assert.Equal(t, got[nameUnanswered], "NO", "a failover after which no node answered ARP")
	assert.Equal(t, got["Lease writes/s by eipd, 10 IPs"], "yes", "6.1 - 0.1 background")
	assert.Equal(t, got["Lease writes/s by eipd, 1000 IPs"], "yes", "6.15 - 0.1 ≤ 3 / 0.5 s + 3 / 30 s")
	assert.Equal(t, got["Lease writes/s by eipd, 2000 IPs"], "NO", "6.4 - 0.1 > 6.1")
	assert.Equal(t, got["eipd peak RSS per node, 1000 IPs"], "NO")
	assert.Equal(t, got["kubectl eip status, 1000 IPs"], "")
	assert.Equal(t, got["cold start ÷ (1000 ÷ that rate)"], "NO", "4 s against 1 s")
	assert.Equal(t, got["reported unheard over the LAN, per node, 1000 IPs, eipd limited to 10 % of a core"], "NO")
}

// TestPlotIsWellFormedSVG decodes the plot and counts what it drew.
func TestPlotIsWellFormedSVG(t *testing.T) {
	svg := sampleReport().Plot()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	circles, polylines := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		assert.NilError(t, err)
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "circle":
				circles++
			case "polyline":
				polylines++
			}
		}
	}
	// 5 failovers + 2 moves + 3 binds as dots; 3 load points × 2 series.
	assert.Equal(t, circles, 5+2+3+6)
	assert.Equal(t, polylines, 3, "writes, reads and one cold start")
	assert.Assert(t, strings.Contains(string(svg), "link cut, lease 2s"))
}

func TestPlotWithoutSamples(t *testing.T) {
	r := &Report{Nodes: 3, Timings: []Timing{defaultTiming}}
	assert.Equal(t, strings.Count(string(r.Plot()), "not measured"), 4)
}

func TestNiceTicks(t *testing.T) {
	assert.DeepEqual(t, niceTicks(0, 2.6), []float64{0, 1, 2, 3})
	assert.DeepEqual(t, niceTicks(0, 10), []float64{0, 2, 4, 6, 8, 10})
	assert.DeepEqual(t, niceTicks(0, 0), []float64{0, 0.2, 0.4, 0.6, 0.8, 1})
}

func TestCountLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eipd.log")
	before := "time=1 level=WARN msg=\"a peer no longer hears this node over the LAN and will judge it dead\" port=9403\n"
	assert.NilError(t, os.WriteFile(path, []byte(before), 0o644))
	mark := logMark(path)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	assert.NilError(t, err)
	_, err = f.WriteString(before + before +
		"time=2 level=INFO msg=unbound ip=198.19.0.1 iface=eth0 reason=x\n" +
		"time=3 level=INFO msg=\"peers hear this node over the LAN again\"\n" +
		"time=4 level=WARN msg=\"the loop stalled; re-reading the locks before binding or refreshing anything\" since=2s\n")
	assert.NilError(t, errors.Join(err, f.Close()))
	c, err := countLog(path, mark)
	assert.NilError(t, err)
	assert.Equal(t, c, LogCounts{Unheard: 2, Unbound: 1, Stalls: 1})
}
