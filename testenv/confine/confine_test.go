package confine

import (
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestDaemonSetPrivileges(t *testing.T) {
	p, err := FromDaemonSet("../../manifests")
	assert.NilError(t, err)
	assert.Check(t, is.DeepEqual(p.caps, []string{"NET_ADMIN", "NET_RAW"}))
	assert.Check(t, is.Equal(p.mask, uint64(0x3000)))
	assert.Check(t, p.readOnlyRoot)
	assert.Check(t, is.DeepEqual(p.devices, []string{"/dev/net/tun"}))
	// The literal environment (the Go runtime's memory limit and its
	// number of threads running Go code) reaches eipd; what the pod's
	// fields give (NODE_NAME) does not.
	var names []string
	for _, e := range p.env {
		name, _, _ := strings.Cut(e, "=")
		names = append(names, name)
	}
	assert.Check(t, is.DeepEqual(names, []string{"GOMEMLIMIT", "GOMAXPROCS"}))
	_, _, env := p.Command("/bin/eipd", nil)
	for _, e := range p.env {
		assert.Check(t, is.Contains(env, e))
	}
}

func TestDevicesOfRefusesOtherVolumes(t *testing.T) {
	charDev, dir := corev1.HostPathCharDev, corev1.HostPathDirectory
	tun := corev1.Volume{Name: "tun", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/net/tun", Type: &charDev}}}
	devs, err := devicesOf([]corev1.Volume{tun}, []corev1.VolumeMount{{Name: "tun", MountPath: "/dev/net/tun"}})
	assert.NilError(t, err)
	assert.Check(t, is.DeepEqual(devs, []string{"/dev/net/tun"}))
	_, err = devicesOf([]corev1.Volume{tun}, []corev1.VolumeMount{{Name: "tun", MountPath: "/dev/tun"}})
	assert.ErrorContains(t, err, "volume tun is not a host character device mounted at its own path")
	run := corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run", Type: &dir}}}
	_, err = devicesOf([]corev1.Volume{run}, []corev1.VolumeMount{{Name: "run", MountPath: "/run"}})
	assert.ErrorContains(t, err, "volume run is not")
}

func TestPrivilegesOfRefusesWhatTestenvCannotReproduce(t *testing.T) {
	yes, no := true, false
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}}
	for name, tc := range map[string]struct {
		sc   *corev1.SecurityContext
		want string
	}{
		"none":        {nil, "no capabilities"},
		"privileged":  {&corev1.SecurityContext{Privileged: &yes, AllowPrivilegeEscalation: &no, Capabilities: caps}, "is privileged"},
		"escalation":  {&corev1.SecurityContext{Capabilities: caps}, "allows privilege escalation"},
		"keeps some":  {&corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Add: caps.Add}}, "not [ALL]"},
		"unknown cap": {&corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: caps.Drop, Add: []corev1.Capability{"BPF"}}}, "adds capability BPF"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := privilegesOf(tc.sc)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestPrivilegesCheck(t *testing.T) {
	p := Privileges{caps: []string{"NET_ADMIN", "NET_RAW"}, mask: 0x3000, readOnlyRoot: true}
	status := func(eff, nnp string) []byte {
		return []byte("Name:\teipd\nCapInh:\t0000000000000000\nCapPrm:\t" + eff + "\nCapEff:\t" + eff +
			"\nCapBnd:\t" + eff + "\nCapAmb:\t0000000000000000\nNoNewPrivs:\t" + nnp + "\n")
	}
	const roMounts = "22 1 254:1 / / ro,relatime shared:1 - ext4 /dev/vda rw\n" +
		"30 22 0:5 /sys /proc/sys rw,nosuid - proc proc rw\n" +
		"31 30 0:5 /sys /proc/sys ro,nosuid - proc proc rw\n" +
		"32 22 0:6 / /dev rw,nosuid - devtmpfs udev rw\n" +
		"33 32 0:7 / /dev rw,nosuid - tmpfs tmpfs rw\n"
	assert.NilError(t, p.check(status("0000000000003000", "1"), []byte(roMounts)))

	err := p.check(status("0000000000203000", "1"), []byte(roMounts))
	assert.ErrorContains(t, err, "CapEff is 0000000000203000, want 0000000000003000")
	assert.ErrorContains(t, p.check(status("0000000000003000", "0"), []byte(roMounts)), "NoNewPrivs is 0")
	rw := "22 1 254:1 / / ro,relatime - ext4 /dev/vda rw\n30 22 0:5 /sys /proc/sys rw,nosuid - proc proc rw\n"
	assert.ErrorContains(t, p.check(status("0000000000003000", "1"), []byte(rw)), "/proc/sys is not mounted read-only")
	rwRoot := "22 1 254:1 / / rw,relatime - ext4 /dev/vda rw\n31 22 0:5 /sys /proc/sys ro - proc proc rw\n"
	assert.ErrorContains(t, p.check(status("0000000000003000", "1"), []byte(rwRoot)), "/ is not mounted read-only")
	hostDev := roMounts[:strings.Index(roMounts, "33 32")]
	assert.ErrorContains(t, p.check(status("0000000000003000", "1"), []byte(hostDev)), "/dev is devtmpfs, not the tmpfs of a container")
}
