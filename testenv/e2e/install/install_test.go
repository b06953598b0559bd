package install

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/image"
	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/realnode"
)

// readmePath is the README whose install section runs here.
const readmePath = "README.md"

// The README's blocks this test runs, by the name of the marker on the line
// before their fence: <!-- readme-test: NAME -->.
const (
	blockHelm      = "install-helm"
	blockManifest  = "install-manifest"
	blockFirstSvc  = "first-service"
	eipRange       = "198.18.101.240/28"
	registryPrefix = "eip-project" // REGISTRY is the registry's host and this, as ghcr.io/eip-project
)

// readmeBlocks returns the marked code blocks of the README, by name.
func readmeBlocks(t *testing.T) map[string]string {
	t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	f, err := os.Open(filepath.Join(root, readmePath))
	assert.NilError(t, err)
	defer f.Close()
	blocks := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		marker, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "<!-- readme-test: ")
		if !ok {
			continue
		}
		name := strings.TrimSpace(strings.TrimSuffix(marker, "-->"))
		assert.Assert(t, s.Scan() && strings.HasPrefix(s.Text(), "```"), "%s: marker %q is not right before a code fence", readmePath, name)
		var body strings.Builder
		for s.Scan() && !strings.HasPrefix(s.Text(), "```") {
			body.WriteString(s.Text() + "\n")
		}
		_, dup := blocks[name]
		assert.Assert(t, !dup, "%s: two blocks marked %q", readmePath, name)
		blocks[name] = body.String()
	}
	assert.NilError(t, s.Err())
	for _, b := range []string{blockHelm, blockManifest, blockFirstSvc} {
		assert.Assert(t, blocks[b] != "", "%s has no block marked <!-- readme-test: %s -->", readmePath, b)
	}
	return blocks
}

// user is a person at the client machine, outside the cluster: a shell
// with kubectl, helm, curl and the release's kubectl-eip on PATH, a
// kubeconfig whose context is the default namespace, and the README's
// variables set to the test cluster's.
type user struct {
	t   *testing.T
	env []string
}

func newUser(t *testing.T) *user {
	t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	helmDir, err := testenv.ToolBinDir(root, "helm")
	assert.NilError(t, err)
	home := t.TempDir()
	plugin := filepath.Join(home, "bin")
	assert.NilError(t, os.MkdirAll(plugin, 0o755))
	archive := filepath.Join(release, "kubectl-eip_linux_"+runtime.GOARCH+".tar.gz")
	out, err := exec.Command("tar", "-xzf", archive, "-C", plugin).CombinedOutput()
	assert.NilError(t, err, "%s", out)
	kubeconfig := filepath.Join(home, "kubeconfig")
	b, err := os.ReadFile(cluster.AdminKubeconfig())
	assert.NilError(t, err)
	assert.NilError(t, os.WriteFile(kubeconfig, b, 0o600))
	u := &user{t: t, env: []string{
		"PATH=" + strings.Join([]string{plugin, helmDir, filepath.Dir(cluster.KubectlPath()), "/usr/local/bin", "/usr/bin", "/bin"}, ":"),
		"HOME=" + home, "KUBECONFIG=" + kubeconfig,
		// The registry's certificate is the cluster CA's, which the
		// user's machine trusts.
		"SSL_CERT_FILE=" + cluster.CACert(),
		"REGISTRY=" + cluster.Registry() + "/" + registryPrefix,
		"EIP_YAML=" + filepath.Join(release, "eip.yaml"),
		"EIP_RANGE=" + eipRange,
		"WEB_IMAGE=" + realnode.WebImage,
	}}
	u.run("kubectl config set-context --current --namespace=default")
	return u
}

// run runs a script with bash -e from the client namespace and returns
// what it printed, failing the test if it fails.
func (u *user) run(script string) string {
	u.t.Helper()
	out, err := u.try(script)
	assert.NilError(u.t, err, "%s\n%s", script, out)
	return out
}

// try is run that returns the error instead.
func (u *user) try(script string) (string, error) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append([]string{"netns", "exec", cluster.State().ClientNetns, "env", "-i"}, u.env...)
	cmd := exec.CommandContext(ctx, "ip", append(args, "bash", "-e", "-o", "pipefail", "-c", script)...)
	out, err := cmd.CombinedOutput()
	u.t.Logf("$ %s\n%s", strings.TrimRight(script, "\n"), out)
	return string(out), err
}

// pushRelease pushes the release's image and chart to the cluster's
// registry as the release workflow pushes them to ghcr.io: the image with
// scripts/release push (over loopback), the chart with `helm push` (from
// the client machine).
func pushRelease(t *testing.T, u *user) (version string) {
	t.Helper()
	charts, err := filepath.Glob(filepath.Join(release, "eip-*.tgz"))
	assert.NilError(t, err)
	assert.Assert(t, is.Len(charts, 1), "the release's chart")
	archive := filepath.Join(release, "eipd-image.tar")
	_, ann, err := image.Open(archive, t.TempDir())
	assert.NilError(t, err)
	version = ann["org.opencontainers.image.ref.name"]
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	push := exec.Command("go", "run", "./scripts/release", "push", "-insecure", archive, cluster.RegistryPush()+"/"+registryPrefix+"/eipd:"+version)
	push.Dir = root
	out, err := push.CombinedOutput()
	assert.NilError(t, err, "%s", out)
	t.Logf("%s", out)
	u.run("helm push " + charts[0] + " oci://" + cluster.Registry() + "/" + registryPrefix + "/charts")
	return version
}

// TestREADMEInstall runs README.md's install section: the Helm install
// from the chart in the registry, then the first Service; then, after
// uninstalling, the install from eip.yaml and the first Service again.
// Each time, the Service's EXTERNAL-IP answers HTTP from the client, and
// eipd runs the release's image, pulled from the registry.
func TestREADMEInstall(t *testing.T) {
	blocks := readmeBlocks(t)
	u := newUser(t)
	version := pushRelease(t, u)

	t.Run("helm", func(t *testing.T) {
		u.t = t
		u.run(blocks[blockHelm])
		firstService(t, u, blocks[blockFirstSvc], version)
	})
	u.t = t
	u.run("kubectl delete --ignore-not-found deployment,service web && helm uninstall eip -n eip-system && " +
		"kubectl -n eip-system wait --for=delete pod -l app.kubernetes.io/component=eipd --timeout=2m")
	t.Run("manifest", func(t *testing.T) {
		u.t = t
		u.run(blocks[blockManifest])
		firstService(t, u, blocks[blockFirstSvc], version)
	})
}

// firstService waits for eipd on every node, runs the README's first
// Service and checks what the client sees.
func firstService(t *testing.T, u *user, block, version string) {
	t.Helper()
	u.run("kubectl -n eip-system rollout status daemonset/eipd --timeout=4m")
	pods, err := cluster.Client().CoreV1().Pods("eip-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=eipd"})
	assert.NilError(t, err)
	assert.Equal(t, len(pods.Items), len(cluster.Nodes()))
	for _, p := range pods.Items {
		assert.Check(t, strings.HasPrefix(p.Spec.Containers[0].Image, "ghcr.io/eip-project/eipd:"+version+"@sha256:"), "%s runs %s", p.Name, p.Spec.Containers[0].Image)
		st := p.Status.ContainerStatuses
		assert.Assert(t, len(st) == 1 && st[0].ImageID != "", "%s: %v", p.Name, st)
		t.Logf("%s on %s runs %s (%s)", p.Name, p.Spec.NodeName, st[0].Image, st[0].ImageID)
	}

	out, err := u.try(block)
	assert.Check(t, err, "the README's first Service failed")
	// The test's web image answers "pod=… node=… remote=ADDRESS".
	assert.Check(t, is.Contains(out, " remote="), "the README's curl got no answer from the web pod")
	// What the client sees once the web pod is ready, whether or not the
	// README waited for it.
	u.run("kubectl rollout status deployment/web --timeout=2m")
	svc, err := cluster.Client().CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Assert(t, len(svc.Status.LoadBalancer.Ingress) == 1, "%v", svc.Status.LoadBalancer)
	ip, err := netip.ParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
	assert.NilError(t, err)
	assert.Check(t, netip.MustParsePrefix(eipRange).Contains(ip), "EXTERNAL-IP %s is outside EIP_RANGE %s", ip, eipRange)
	// kube-proxy programs the Service a moment after the pod is ready.
	var answer string
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		resp, err := cluster.ClientHTTP().Get("http://" + ip.String() + "/")
		if err != nil {
			return false, err.Error()
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer = fmt.Sprintf("%s %s", resp.Status, body)
		return err == nil && resp.StatusCode == http.StatusOK, answer
	})
	t.Logf("GET http://%s/ from the client: %s", ip, answer)
}
