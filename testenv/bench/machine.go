package bench

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes where a run happened; figures mean little without it.
type Machine struct {
	Hostname  string `json:"hostname"`
	Kernel    string `json:"kernel"`
	CPU       string `json:"cpu"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int64  `json:"memoryMiB"`
	GoVersion string `json:"goVersion"`
	// LoadStart and LoadEnd are /proc/loadavg when the run began and
	// ended: other work on the machine shows in the figures.
	LoadStart string `json:"loadStart"`
	LoadEnd   string `json:"loadEnd"`
	// Commit and Eipd are filled in by the caller (git describe, eipd
	// --version).
	Commit string `json:"commit,omitempty"`
	Eipd   string `json:"eipd,omitempty"`
	// NeighTable says which of the machine's neighbour table thresholds
	// the test cluster raised for the run (testenv.Options.ServiceIPs),
	// empty when none: a property of the test bed, whose namespaces share
	// one table where real nodes have one each.
	NeighTable string `json:"neighTable,omitempty"`
}

// DescribeMachine reads what it can of this machine; what it cannot is
// left empty.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadStart: loadAvg()}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseInt(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		m.MemoryMiB = kb >> 10
	}
	return m
}

// procField is the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
