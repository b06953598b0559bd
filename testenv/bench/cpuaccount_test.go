package bench

import (
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestParseMachineCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	busy, steal, err := parseMachineCPU("cpu  1000 20 300 5000 40 5 15 7 100 0\ncpu0 500 10 150 2500 20 2 8 3 50 0\n")
	assert.NilError(t, err)
	assert.Equal(t, busy, 13400*time.Millisecond, "user+nice+system+irq+softirq; guest is in user")
	assert.Equal(t, steal, 70*time.Millisecond)
	_, _, err = parseMachineCPU("intr 1 2 3\n")
	assert.ErrorContains(t, err, "unexpected first line")
}

func TestReadMachineCPU(t *testing.T) {
	b, err := os.ReadFile("/proc/stat")
	assert.NilError(t, err)
	busy, _, err := parseMachineCPU(string(b))
	assert.NilError(t, err)
	assert.Assert(t, busy > 0)
}

// TestAccountBetween: an eipd started within the phase counts from its
// start; what no process of the bed used is other work.
func TestAccountBetween(t *testing.T) {
	at := time.Unix(100, 0)
	s := time.Second
	a := cpuSnapshot{at: at, busy: 50 * s, procs: map[string]time.Duration{procAPIServer: 10 * s, procEtcd: 5 * s, procBench: 2 * s}}
	b := cpuSnapshot{at: at.Add(10 * s), busy: 66 * s, steal: s,
		procs: map[string]time.Duration{procAPIServer: 16 * s, procEtcd: 7 * s, procBench: 3 * s, "node-1": 3 * s, "node-2": 2 * s}}
	acc := accountBetween(a, b)
	acc.CPUs = 2
	assert.Equal(t, acc.Wall, 10*s)
	assert.Equal(t, acc.Busy, 16*s)
	assert.Equal(t, acc.Processes[procAPIServer], 6*s)
	assert.Equal(t, acc.Processes["node-1"], 3*s)
	assert.Equal(t, acc.Eipds(), 5*s)
	assert.Equal(t, acc.ControlPlane(), 8*s)
	assert.Equal(t, acc.Other(), 2*s, "16 busy less 6+2+1+3+2")
	assert.Equal(t, acc.Share(acc.Busy), 80.0)
	assert.Equal(t, acc.Breakdown(), "of 2 cores for 10s: kube-apiserver 30 %, etcd 10 %, eipds 25 %, benchmark 5 %, other 10 %, stolen 5 %")
}
