// Package confine starts a process with exactly the privileges that eipd's
// DaemonSet grants its container, read from the manifest, and checks them
// in the running process. testenv starts every eipd this way, and the
// netif tests run the adapters under it.
package confine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Privileges is what the DaemonSet in manifests/ lets eipd do, read from
// the manifest itself so that tests cannot drift from it: every process
// started with them gets exactly these capabilities (and no others, in any of
// its sets), no_new_privs, a read-only /proc/sys like every container
// runtime mounts, a /dev holding only what a runtime puts there and the
// character devices the manifest mounts from the host, and a read-only root
// filesystem when the manifest asks for one. The runtime's seccomp profile is not applied: it forbids system calls
// eipd has no reason to make, and the real-node tier runs the pod itself.
type Privileges struct {
	caps         []string // capability names as in the manifest, e.g. NET_ADMIN
	mask         uint64   // their bits
	readOnlyRoot bool
	devices      []string // host character devices mounted at the same path
	// env is the container's environment given as values (GOMEMLIMIT…),
	// NAME=value: eipd runs with the Go runtime settings of the pod.
	env []string
}

// runtimeDevices are the device nodes a container runtime (runc) creates in
// every container's /dev.
var runtimeDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// capabilityBits are the capabilities testenv knows how to grant, by the
// names Kubernetes uses (linux/capability.h numbers).
var capabilityBits = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7,
	"NET_BIND_SERVICE": 10, "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13,
	"SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "SYS_RESOURCE": 24,
}

// FromDaemonSet reads the eipd container's security context from
// manifests/daemonset.yaml.
func FromDaemonSet(manifestsDir string) (Privileges, error) {
	path := filepath.Join(manifestsDir, "daemonset.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return Privileges{}, fmt.Errorf("read eipd's privileges: %w", err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		return Privileges{}, fmt.Errorf("read eipd's privileges from %s: %w", path, err)
	}
	i := slices.IndexFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "eipd" })
	if i < 0 {
		return Privileges{}, fmt.Errorf("read eipd's privileges from %s: no container named eipd", path)
	}
	c := ds.Spec.Template.Spec.Containers[i]
	p, err := privilegesOf(c.SecurityContext)
	if err != nil {
		return Privileges{}, err
	}
	if p.devices, err = devicesOf(ds.Spec.Template.Spec.Volumes, c.VolumeMounts); err != nil {
		return Privileges{}, fmt.Errorf("read eipd's privileges from %s: %w", path, err)
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			p.env = append(p.env, e.Name+"="+e.Value)
		}
	}
	return p, nil
}

// devicesOf accepts only volumes testenv can reproduce: a host character
// device mounted at its own path.
func devicesOf(volumes []corev1.Volume, mounts []corev1.VolumeMount) ([]string, error) {
	byName := map[string]corev1.Volume{}
	for _, v := range volumes {
		byName[v.Name] = v
	}
	var devs []string
	for _, m := range mounts {
		v, ok := byName[m.Name]
		hp := v.HostPath
		if !ok || hp == nil || hp.Type == nil || *hp.Type != corev1.HostPathCharDev || hp.Path != m.MountPath {
			return nil, fmt.Errorf("volume %s is not a host character device mounted at its own path", m.Name)
		}
		devs = append(devs, hp.Path)
	}
	return devs, nil
}

// privilegesOf accepts only the shape of security context testenv can
// reproduce faithfully: not privileged, no privilege escalation, every
// default capability dropped and a few added back.
func privilegesOf(sc *corev1.SecurityContext) (Privileges, error) {
	if sc == nil || sc.Capabilities == nil {
		return Privileges{}, fmt.Errorf("eipd's container has no capabilities in its security context")
	}
	if sc.Privileged != nil && *sc.Privileged {
		return Privileges{}, fmt.Errorf("eipd's container is privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		return Privileges{}, fmt.Errorf("eipd's container allows privilege escalation")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		return Privileges{}, fmt.Errorf("eipd's container drops %v, not [ALL]", sc.Capabilities.Drop)
	}
	p := Privileges{readOnlyRoot: sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem}
	for _, c := range sc.Capabilities.Add {
		bit, ok := capabilityBits[string(c)]
		if !ok {
			return Privileges{}, fmt.Errorf("eipd's container adds capability %s, which testenv cannot grant", c)
		}
		p.caps = append(p.caps, string(c))
		p.mask |= 1 << bit
	}
	return p, nil
}

// confineScript runs in the process's own mount namespace (`ip netns exec`
// makes one), as root with every capability: it makes /proc/sys (and the
// root filesystem) read-only there, replaces /dev with a tmpfs holding the
// runtime's devices and the manifest's (the same nodes, by number), then
// setpriv drops every capability
// outside the set from all five sets and sets no_new_privs before it execs
// the daemon, which keeps the pid.
const confineScript = `set -e
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
nodes=
for d in $EIP_CONFINE_DEVICES; do nodes="$nodes $d:$(stat -c '%t:%T' "$d")"; done
mount -t tmpfs -o mode=755,nosuid tmpfs /dev
for n in $nodes; do
	d=${n%%:*} num=${n#*:}
	mkdir -p "$(dirname "$d")"
	mknod -m 666 "$d" c "$((0x${num%%:*}))" "$((0x${num#*:}))"
done
if [ "$EIP_CONFINE_RO_ROOT" = 1 ]; then mount -o remount,bind,ro /; fi
exec setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set="$EIP_CONFINE_CAPS" -- "$@"
`

// Command returns the program and arguments that run bin confined; env
// holds the variables confineScript reads and the container's literal
// environment, which reaches bin through the exec chain.
func (p Privileges) Command(bin string, args []string) (prog string, argv, env []string) {
	set := "-all"
	for _, c := range p.caps {
		set += ",+" + strings.ToLower(c)
	}
	ro := "0"
	if p.readOnlyRoot {
		ro = "1"
	}
	devs := strings.Join(append(slices.Clone(runtimeDevices), p.devices...), " ")
	return "sh", append([]string{"-c", confineScript, "eip-confine", bin}, args...),
		append([]string{"EIP_CONFINE_CAPS=" + set, "EIP_CONFINE_RO_ROOT=" + ro, "EIP_CONFINE_DEVICES=" + devs}, p.env...)
}

// Verify waits until pid runs bin, past the fork and the launcher's execs
// (ip, sh, setpriv), and checks its capability sets, no_new_privs and
// read-only mounts. A process that exits first is not checked; its exit is
// the caller's to report.
func (p Privileges) Verify(pid int, bin string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		argv, err := procArgv(pid)
		// A binary runs with argv[0] = bin; a script with its interpreter
		// first and bin second.
		if err == nil && (argv[0] == bin || len(argv) > 1 && argv[1] == bin) {
			break
		}
		select {
		case <-exited:
			return nil
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d did not exec %s within %s (argv %q, %v)", pid, bin, timeout, argv, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fmt.Errorf("check privileges of pid %d: %w", pid, err)
	}
	mountinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return fmt.Errorf("check privileges of pid %d: %w", pid, err)
	}
	return p.check(status, mountinfo)
}

// check compares a process's /proc status and mountinfo with the
// privileges.
func (p Privileges) check(status, mountinfo []byte) error {
	want := map[string]uint64{"CapEff": p.mask, "CapPrm": p.mask, "CapBnd": p.mask, "CapInh": 0, "CapAmb": 0}
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	var problems []string
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"} {
		v, err := strconv.ParseUint(got[k], 16, 64)
		if err != nil || v != want[k] {
			problems = append(problems, fmt.Sprintf("%s is %s, want %016x (%v)", k, got[k], want[k], p.caps))
		}
	}
	if got["NoNewPrivs"] != "1" {
		problems = append(problems, "NoNewPrivs is "+got["NoNewPrivs"]+", want 1")
	}
	readOnly := []string{"/proc/sys"}
	if p.readOnlyRoot {
		readOnly = append(readOnly, "/")
	}
	for _, m := range readOnly {
		if !mountedReadOnly(mountinfo, m) {
			problems = append(problems, m+" is not mounted read-only")
		}
	}
	if fs := mountedFS(mountinfo, "/dev"); fs != "tmpfs" {
		problems = append(problems, "/dev is "+fs+", not the tmpfs of a container")
	}
	if len(problems) > 0 {
		return fmt.Errorf("eipd runs with other privileges than the DaemonSet grants: %s", strings.Join(problems, "; "))
	}
	return nil
}

// mountedReadOnly reports whether the last mount at target in a mountinfo
// listing (the one a lookup sees) has the per-mount ro option.
func mountedReadOnly(mountinfo []byte, target string) bool {
	ro, found := false, false
	for line := range strings.Lines(string(mountinfo)) {
		f := strings.Fields(line)
		if len(f) < 6 || f[4] != target {
			continue
		}
		found = true
		ro = slices.Contains(strings.Split(f[5], ","), "ro")
	}
	return found && ro
}

// mountedFS is the filesystem type of the last mount at target.
func mountedFS(mountinfo []byte, target string) string {
	fs := "not mounted"
	for line := range strings.Lines(string(mountinfo)) {
		f := strings.Fields(line)
		if len(f) < 6 || f[4] != target {
			continue
		}
		if i := slices.Index(f, "-"); i > 0 && i+1 < len(f) {
			fs = f[i+1]
		}
	}
	return fs
}

func procArgv(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\x00"), nil
}
