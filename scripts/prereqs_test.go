// Package scripts holds the tests of the shell entry points in this
// directory.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// machine is a simulated machine for prereqs.sh: a PATH directory of
// symlinks to every command of this one except those left out, an
// os-release file, and a recording apt-get.
type machine struct {
	t        *testing.T
	bin      string // the only PATH entry
	aptLog   string // one line per apt-get call: its arguments, then whether policy-rc.d was in place
	policyRC string
	env      []string
}

// newMachine builds a PATH without the commands named in hide (and without
// the real apt-get). The fake apt-get records each call and, on install,
// links the commands in provide into the PATH directory, as installing
// their packages would.
func newMachine(t *testing.T, osRelease, uid string, hide, provide []string) *machine {
	t.Helper()
	dir := t.TempDir()
	m := &machine{t: t, bin: filepath.Join(dir, "bin"), aptLog: filepath.Join(dir, "apt.log"), policyRC: filepath.Join(dir, "policy-rc.d")}
	assert.NilError(t, os.Mkdir(m.bin, 0o755))
	skip := map[string]bool{"apt-get": true}
	for _, h := range hide {
		skip[h] = true
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH") + ":/usr/local/go/bin") {
		entries, _ := os.ReadDir(d) // a PATH entry that does not exist holds nothing
		for _, e := range entries {
			link := filepath.Join(m.bin, e.Name())
			if skip[e.Name()] {
				continue
			}
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier PATH entry wins, as it does for the shell
			}
			assert.NilError(t, os.Symlink(filepath.Join(d, e.Name()), link))
		}
	}
	var links strings.Builder
	for _, p := range provide {
		real, err := exec.LookPath(p)
		if err != nil {
			t.Skipf("%s is not installed on this machine: %v", p, err)
		}
		links.WriteString("ln -s " + real + " " + filepath.Join(m.bin, p) + "\n")
	}
	apt := "#!/bin/sh\n" +
		"if [ -e " + m.policyRC + " ]; then p=policy; else p=no-policy; fi\n" +
		"echo \"$* $p\" >>" + m.aptLog + "\n" +
		"[ \"$1\" = install ] || exit 0\n" + links.String()
	assert.NilError(t, os.WriteFile(filepath.Join(m.bin, "apt-get"), []byte(apt), 0o755))
	rel := filepath.Join(dir, "os-release")
	assert.NilError(t, os.WriteFile(rel, []byte(osRelease), 0o644))
	m.env = []string{"PATH=" + m.bin, "HOME=" + dir, "EIP_PREREQS_UID=" + uid,
		"EIP_PREREQS_OS_RELEASE=" + rel, "EIP_PREREQS_POLICY_RC=" + m.policyRC}
	return m
}

// run runs prereqs.sh on the machine and returns its exit code and output.
func (m *machine) run() (int, string) {
	m.t.Helper()
	bash, err := exec.LookPath("bash")
	assert.NilError(m.t, err)
	cmd := exec.Command(bash, "prereqs.sh")
	cmd.Env = m.env
	out, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode(), string(out)
	}
	assert.NilError(m.t, err, string(out))
	return 0, string(out)
}

// aptCalls returns the fake apt-get's calls, in order.
func (m *machine) aptCalls() []string {
	b, err := os.ReadFile(m.aptLog)
	if os.IsNotExist(err) {
		return nil
	}
	assert.NilError(m.t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

const debian = "ID=debian\nVERSION_ID=\"12\"\n"

func TestPrereqsNotRootPrintsTheCommand(t *testing.T) {
	m := newMachine(t, debian, "1000", []string{"nft", "ping"}, nil)
	code, out := m.run()
	assert.Equal(t, code, 1, out)
	assert.Check(t, is.Contains(out, "prereqs: not root"))
	assert.Check(t, is.Contains(out, "prereqs: missing nft ping: run sudo apt-get install -y --no-install-recommends nftables iputils-ping\n"))
	assert.Check(t, is.Len(m.aptCalls(), 0))
}

func TestPrereqsElsewhereNamesThePackages(t *testing.T) {
	m := newMachine(t, "ID=fedora\nID_LIKE=\"rhel centos\"\n", "0", []string{"nft", "ping"}, nil)
	code, out := m.run()
	assert.Equal(t, code, 1, out)
	assert.Check(t, is.Equal(out, "prereqs: missing nft ping: install them with your distribution's package manager (the Debian packages are: nftables iputils-ping) and run again\n"))
	assert.Check(t, is.Len(m.aptCalls(), 0))
}

// The install tests run the kernel check for real, which needs root.
func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: after installing, prereqs.sh checks the kernel in a new network namespace")
	}
}

func TestPrereqsInstallsAsRootOnUbuntu(t *testing.T) {
	needRoot(t)
	m := newMachine(t, "ID=ubuntu\nID_LIKE=debian\n", "0", []string{"nft", "ping"}, []string{"nft", "ping"})
	code, out := m.run()
	assert.Equal(t, code, 0, out)
	assert.Check(t, is.Equal(out, "prereqs: installing nftables iputils-ping (missing: nft ping)\nprereqs: ok\n"))
	assert.Check(t, is.DeepEqual(m.aptCalls(), []string{
		"update -qq policy",
		"install -y -qq --no-install-recommends nftables iputils-ping policy",
	}))
	_, err := os.Stat(m.policyRC)
	assert.Check(t, os.IsNotExist(err), "policy-rc.d left behind: %v", err)
	for _, c := range []string{"nft", "ping"} {
		_, err := os.Stat(filepath.Join(m.bin, c))
		assert.Check(t, err)
	}
}

func TestPrereqsInstallThatDoesNotHelpFails(t *testing.T) {
	needRoot(t)
	m := newMachine(t, debian, "0", []string{"ping"}, nil)
	code, out := m.run()
	assert.Equal(t, code, 1, out)
	assert.Check(t, is.Contains(out, "prereqs: still missing after apt-get install iputils-ping: ping"))
	assert.Check(t, is.Len(m.aptCalls(), 2))
}
