package bench

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The processes of the test bed a CPUAccount names besides the eipds,
// which go by their node's name.
const (
	procAPIServer = "kube-apiserver"
	procEtcd      = "etcd"
	procBench     = "bench"
)

// CPUAccount is where the machine's CPU went over one phase of a run: the
// plain client's creates, or eip's cold start. On this bed the API server,
// etcd, the eipds and the benchmark share the same cores, where in a real
// cluster the eipds run on other machines.
type CPUAccount struct {
	Wall time.Duration `json:"wall"`
	// CPUs is the number of cores. Busy is the time they spent on
	// anything but idling (/proc/stat): every process of the machine,
	// other work beside the benchmark included, and the kernel's
	// interrupts. Steal is what the hypervisor gave to other machines.
	CPUs  int           `json:"cpus"`
	Busy  time.Duration `json:"busy"`
	Steal time.Duration `json:"steal"`
	// Processes is the CPU time (user and system) each process of the
	// bed used in the phase: kube-apiserver, etcd, the benchmark ("bench")
	// and each eipd by node name, from its start if it started in the
	// phase.
	Processes map[string]time.Duration `json:"processes"`
}

// Capacity is what the cores could have given over the phase.
func (a CPUAccount) Capacity() time.Duration { return a.Wall * time.Duration(a.CPUs) }

// Share is d in percent of Capacity.
func (a CPUAccount) Share(d time.Duration) float64 {
	if a.Capacity() <= 0 {
		return 0
	}
	return 100 * float64(d) / float64(a.Capacity())
}

// Eipds is the CPU time of every eipd of the phase together.
func (a CPUAccount) Eipds() time.Duration {
	var sum time.Duration
	for name, d := range a.Processes {
		if !isBedProcess(name) {
			sum += d
		}
	}
	return sum
}

// Other is the busy time no process of the bed accounts for: other work
// on the machine and the kernel's own.
func (a CPUAccount) Other() time.Duration {
	other := a.Busy
	for _, d := range a.Processes {
		other -= d
	}
	return max(other, 0)
}

// ControlPlane is the CPU time of kube-apiserver and etcd.
func (a CPUAccount) ControlPlane() time.Duration {
	return a.Processes[procAPIServer] + a.Processes[procEtcd]
}

// Breakdown names each part's share of the cores, eipds together.
func (a CPUAccount) Breakdown() string {
	parts := []string{fmt.Sprintf("%s %.0f %%", procAPIServer, a.Share(a.Processes[procAPIServer])),
		fmt.Sprintf("%s %.0f %%", procEtcd, a.Share(a.Processes[procEtcd]))}
	if e := a.Eipds(); e > 0 {
		parts = append(parts, fmt.Sprintf("eipds %.0f %%", a.Share(e)))
	}
	parts = append(parts, fmt.Sprintf("benchmark %.0f %%", a.Share(a.Processes[procBench])),
		fmt.Sprintf("other %.0f %%", a.Share(a.Other())))
	if a.Steal > 0 {
		parts = append(parts, fmt.Sprintf("stolen %.0f %%", a.Share(a.Steal)))
	}
	return fmt.Sprintf("of %d cores for %s: %s", a.CPUs, a.Wall.Round(10*time.Millisecond), strings.Join(parts, ", "))
}

func isBedProcess(name string) bool {
	return name == procAPIServer || name == procEtcd || name == procBench
}

// cpuSnapshot is the CPU used so far by the machine and the bed's
// processes.
type cpuSnapshot struct {
	at          time.Time
	busy, steal time.Duration
	procs       map[string]time.Duration
}

// cpuSnapshot reads the CPU time of the control plane, the benchmark and
// every eipd that runs, and of the machine.
func (e *env) cpuSnapshot() (cpuSnapshot, error) {
	pids := map[string]int{procAPIServer: e.c.APIServerPID(), procEtcd: e.c.EtcdPID(), procBench: os.Getpid()}
	for _, n := range e.nodes {
		if pid := e.c.DaemonPID(n.Name); pid != 0 {
			pids[n.Name] = pid
		}
	}
	s := cpuSnapshot{at: time.Now(), procs: map[string]time.Duration{}}
	for _, name := range slices.Sorted(maps.Keys(pids)) {
		if pids[name] == 0 {
			return s, fmt.Errorf("account CPU: %s does not run", name)
		}
		cpu, err := readCPU(pids[name])
		if err != nil {
			return s, fmt.Errorf("account CPU: %w", err)
		}
		s.procs[name] = cpu
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, fmt.Errorf("account CPU: %w", err)
	}
	if s.busy, s.steal, err = parseMachineCPU(string(b)); err != nil {
		return s, fmt.Errorf("account CPU: %w", err)
	}
	return s, nil
}

// accountBetween is what the CPU did from a to b. A process b has and a
// has not started in between.
func accountBetween(a, b cpuSnapshot) CPUAccount {
	acc := CPUAccount{Wall: b.at.Sub(a.at), CPUs: runtime.NumCPU(), Busy: b.busy - a.busy, Steal: b.steal - a.steal,
		Processes: map[string]time.Duration{}}
	for name, cpu := range b.procs {
		acc.Processes[name] = cpu - a.procs[name]
	}
	return acc
}

// parseMachineCPU reads the busy and stolen time of all cores from the
// first line of /proc/stat: user nice system idle iowait irq softirq steal
// guest guest_nice, in clock ticks. Guest time is counted in user time
// already; idle and iowait are not busy.
func parseMachineCPU(stat string) (busy, steal time.Duration, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks [8]int64
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	const user, nice, system, irq, softirq, stolen = 0, 1, 2, 5, 6, 7
	busyTicks := ticks[user] + ticks[nice] + ticks[system] + ticks[irq] + ticks[softirq]
	return time.Duration(busyTicks) * time.Second / clockTicks, time.Duration(ticks[stolen]) * time.Second / clockTicks, nil
}
