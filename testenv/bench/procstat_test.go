package bench

import (
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestParseStatus(t *testing.T) {
	s, err := parseStatus("Name:\teipd\nVmPeak:\t  900000 kB\nVmHWM:\t   30000 kB\nVmRSS:\t   25000 kB\nThreads:\t9\n")
	assert.NilError(t, err)
	assert.Equal(t, s.PeakRSS, int64(30000*1024))
	assert.Equal(t, s.RSS, int64(25000*1024))
	_, err = parseStatus("Name:\tkthreadd\n")
	assert.ErrorContains(t, err, "no VmRSS")
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis must not shift fields.
	stat := "4242 (e ip)d) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 12345 800000000 6000 184467 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	cpu, err := parseStatCPU(stat)
	assert.NilError(t, err)
	assert.Equal(t, cpu, 3*time.Second)
	_, err = parseStatCPU("1 (x) S 1 2")
	assert.ErrorContains(t, err, "fields")
}

func TestReadProcSelf(t *testing.T) {
	s, err := ReadProc(os.Getpid())
	assert.NilError(t, err)
	assert.Assert(t, s.RSS > 0 && s.PeakRSS >= s.RSS, "%+v", s)
}

func TestCPUPercent(t *testing.T) {
	at := time.Unix(0, 0)
	a := ProcSample{At: at, CPU: time.Second}
	b := ProcSample{At: at.Add(10 * time.Second), CPU: 2 * time.Second}
	assert.Equal(t, CPUPercent(a, b), 10.0)
	assert.Equal(t, CPUPercent(b, b), 0.0)
}
