package workload

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/realnode"
)

// The web application's two IPs: ExternalIP, the Service's spec.externalIPs,
// and an IP eip allocates for the LoadBalancer Service from LBPool.
var (
	ExternalIP = testenv.ServiceIP(1)
	LBPool     = netip.MustParsePrefix("198.18.101.0/24")
	// Ranges is the ConfigMap's ranges for them.
	Ranges = ExternalIP.String() + "/32\n" + LBPool.String() + " name=pool auto-assign\n"
)

const (
	// AppNamespace holds the web application.
	AppNamespace = "default"
	// EipdSelector selects the DaemonSet's pods (manifests/daemonset.yaml).
	EipdSelector = "app.kubernetes.io/name=eip,app.kubernetes.io/component=eipd"
)

func kubectl(ctx context.Context, c *testenv.Cluster, args ...string) error {
	_, err := c.Kubectl(ctx, args...)
	return err
}

// InstallEIP runs `kubectl apply -k` on the repository's manifests/, sets
// the ConfigMap's ranges to Ranges and waits until the DaemonSet is Ready
// on every node.
func InstallEIP(ctx context.Context, c *testenv.Cluster) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	return InstallEIPFrom(ctx, c, filepath.Join(root, "manifests"))
}

// InstallEIPFrom is InstallEIP with the kustomize base in dir: another
// release's manifests/.
func InstallEIPFrom(ctx context.Context, c *testenv.Cluster, dir string) error {
	if err := kubectl(ctx, c, "apply", "-k", dir); err != nil {
		return err
	}
	cms := c.Client().CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(ctx, testenv.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data["ranges"] = Ranges
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if err := allowAddresses(ctx, c); err != nil {
		return err
	}
	return WaitDaemonSet(ctx, c)
}

// allowAddresses sets the parameters of the admission policies, as an
// administrator would: the ranges' addresses, and the web application's
// namespace may set spec.externalIPs. A release from before the policies
// were part of the base has no parameters to set.
func allowAddresses(ctx context.Context, c *testenv.Cluster) error {
	cms := c.Client().CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(ctx, "eip-admission", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["cidrs"] = ExternalIP.String() + "/32, " + LBPool.String()
	cm.Data["external-ip-namespaces"] = AppNamespace
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// WaitDaemonSet waits until eipd's DaemonSet has rolled out.
func WaitDaemonSet(ctx context.Context, c *testenv.Cluster) error {
	return kubectl(ctx, c, "-n", testenv.Namespace, "rollout", "status", "daemonset/eipd", "--timeout=3m")
}

// DeployWeb deploys the web application with its two Services and returns
// the LoadBalancer IP eip allocated.
func DeployWeb(ctx context.Context, c *testenv.Cluster) (netip.Addr, error) {
	if err := c.Apply(ctx, []byte(webApp)); err != nil {
		return netip.Addr{}, err
	}
	if err := kubectl(ctx, c, "-n", AppNamespace, "rollout", "status", "deployment/web", "--timeout=3m"); err != nil {
		return netip.Addr{}, err
	}
	for {
		svc, err := c.Client().CoreV1().Services(AppNamespace).Get(ctx, "web-lb", metav1.GetOptions{})
		if err != nil {
			return netip.Addr{}, err
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && LBPool.Contains(a) {
				return a, servedOnEveryNode(ctx, c, svc.Spec.Ports[0].NodePort)
			}
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, fmt.Errorf("no LoadBalancer IP for web-lb: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// servedOnEveryNode waits until kube-proxy on every node delivers the web
// application: its pods are ready a second or so before every kube-proxy
// has programmed the Services, and until then a node an IP moves to
// refuses the client's connections (no endpoints, to its rules), which no
// placement of eip's avoids. The LoadBalancer Service's node port on each
// node answering says that node's kube-proxy has the web application's
// endpoints.
func servedOnEveryNode(ctx context.Context, c *testenv.Cluster, nodePort int32) error {
	hc := c.ClientHTTP()
	hc.Timeout = time.Second
	for _, n := range c.Nodes() {
		url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(n.IPv4, uint16(nodePort)))
		for {
			resp, err := hc.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("web-lb's node port on %s: %w (last: %v)", n.Name, ctx.Err(), err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// webApp is the application behind eip's IPs: three pods on pod networking
// behind a Service with an external IP and a LoadBalancer Service. The pods
// keep serving for a few seconds after SIGTERM (web does), so that no
// request reaches a pod that stopped listening while endpoints update.
var webApp = WebDeployment("web", 3) + `---
apiVersion: v1
kind: Service
metadata: {name: web-ext, namespace: ` + AppNamespace + `}
spec:
  selector: {app: web}
  externalIPs: ["` + ExternalIP.String() + `"]
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-lb, namespace: ` + AppNamespace + `}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`

// WebDeployment is a Deployment of the web application named name, its
// replicas pods labelled app=name and spread over the nodes.
func WebDeployment(name string, replicas int) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `, namespace: ` + AppNamespace + `}
spec:
  replicas: ` + strconv.Itoa(replicas) + `
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec:
      terminationGracePeriodSeconds: 15
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: ` + name + `}}}
      containers:
      - name: web
        image: ` + realnode.WebImage + `
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
`
}

// Holder is the node the IP's lock names, "" if none.
func Holder(ctx context.Context, c *testenv.Cluster, ip netip.Addr) (string, error) {
	l, err := c.Client().CoordinationV1().Leases(testenv.Namespace).Get(ctx, lease.NameFor(ip), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// EipdPod is the name of the DaemonSet's pod on the node.
func EipdPod(ctx context.Context, c *testenv.Cluster, node string) (string, error) {
	pods, err := c.Client().CoreV1().Pods(testenv.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: EipdSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("no eipd pod on %s", node)
}

// ImageName is eipd's image name in manifests/.
const ImageName = "ghcr.io/eip-project/eipd"

// ManifestImage is the image manifests/ names: ImageName at the release
// of the repository's VERSION file (a test enforces it).
func ManifestImage() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return "", err
	}
	return ImageName + ":" + strings.TrimSpace(string(b)), nil
}

// EipdImage builds eipd's image the way `make image` does (scripts/image.sh)
// for this machine's platform, tagged version, into dir. With asManifests
// set it is also named ManifestImage, as pushing it under the manifests'
// name would.
func EipdImage(ctx context.Context, dir, version string, asManifests bool) (realnode.Image, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return realnode.Image{}, err
	}
	img, err := buildImage(ctx, root, dir, version)
	if err != nil || !asManifests {
		return img, err
	}
	m, err := ManifestImage()
	img.Tags = []string{m}
	return img, err
}

// EipdImageAt builds eipd's image, tagged version, into dir from the
// repository as it was at commit, with that commit's scripts/image.sh, and
// returns the commit's tree too (its manifests/ among it), extracted under
// dir.
func EipdImageAt(ctx context.Context, dir, version, commit string) (realnode.Image, string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return realnode.Image{}, "", err
	}
	tree := filepath.Join(dir, "tree-"+version)
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return realnode.Image{}, "", err
	}
	// git archive | tar: the commit's files, without touching the
	// repository's worktrees.
	extract := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "extract", root, commit, tree)
	if b, err := extract.CombinedOutput(); err != nil {
		return realnode.Image{}, "", fmt.Errorf("extract %s: %w: %s", commit, err, b)
	}
	img, err := buildImage(ctx, tree, dir, version)
	return img, tree, err
}

// buildImage runs tree's scripts/image.sh for this machine's platform into
// dir.
func buildImage(ctx context.Context, tree, dir, version string) (realnode.Image, error) {
	out := filepath.Join(dir, "eipd-"+version+".tar")
	cmd := exec.CommandContext(ctx, filepath.Join(tree, "scripts", "image.sh"))
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "VERSION="+version, "PLATFORMS=linux/"+runtime.GOARCH, "OUT="+out, "IMAGE="+ImageName)
	if b, err := cmd.CombinedOutput(); err != nil {
		return realnode.Image{}, fmt.Errorf("scripts/image.sh in %s: %w: %s", tree, err, b)
	}
	return realnode.Image{Archive: out, Ref: ImageName + ":" + version}, nil
}
