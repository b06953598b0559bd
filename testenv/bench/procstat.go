package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcSample is what /proc says of one process at one moment.
type ProcSample struct {
	At time.Time `json:"at"`
	// RSS and PeakRSS (VmRSS, VmHWM) in bytes.
	RSS     int64 `json:"rss"`
	PeakRSS int64 `json:"peakRSS"`
	// CPU is user plus system time consumed so far.
	CPU time.Duration `json:"cpu"`
}

// ReadProc samples /proc/<pid>.
func ReadProc(pid int) (ProcSample, error) {
	at := time.Now()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcSample{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	s, err := parseStatus(string(status))
	if err != nil {
		return ProcSample{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	if s.CPU, err = readCPU(pid); err != nil {
		return ProcSample{}, err
	}
	s.At = at
	return s, nil
}

// readCPU is the CPU time process pid used so far.
func readCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read process %d: %w", pid, err)
	}
	cpu, err := parseStatCPU(string(stat))
	if err != nil {
		return 0, fmt.Errorf("read process %d: %w", pid, err)
	}
	return cpu, nil
}

// parseStatus reads VmRSS and VmHWM (in kB) from /proc/<pid>/status.
func parseStatus(status string) (ProcSample, error) {
	var s ProcSample
	found := 0
	for line := range strings.Lines(status) {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return s, fmt.Errorf("status: unexpected %s %q", key, val)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return s, fmt.Errorf("status: %s: %w", key, err)
		}
		if key == "VmRSS" {
			s.RSS = kb << 10
		} else {
			s.PeakRSS = kb << 10
		}
		found++
	}
	if found != 2 {
		return s, fmt.Errorf("status: no VmRSS and VmHWM")
	}
	return s, nil
}

// parseStatCPU returns utime+stime from /proc/<pid>/stat. The command name
// (field 2) may hold spaces and parentheses, so fields are counted from the
// last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields", len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// CPUPercent is the CPU used between two samples, in percent of one core.
func CPUPercent(a, b ProcSample) float64 {
	wall := b.At.Sub(a.At)
	if wall <= 0 {
		return 0
	}
	return 100 * float64(b.CPU-a.CPU) / float64(wall)
}
