package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// tokenLifetime outlives any test run.
const tokenLifetime = 24 * 60 * 60

type kubeconfigUser struct {
	certPEM, keyPEM []byte
	token           string
}

func writeKubeconfig(path, server string, caPEM []byte, user kubeconfigUser) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: user.certPEM,
		ClientKeyData:         user.keyPEM,
		Token:                 user.token,
	}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "user", Namespace: Namespace}
	cfg.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// ServiceAccountToken requests a token for the ServiceAccount eip.
func (c *Cluster) ServiceAccountToken(ctx context.Context) (string, error) {
	lifetime := int64(tokenLifetime)
	tr, err := c.client.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &lifetime}},
		metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for %s/%s: %w", Namespace, ServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountConfig is a client configuration for the test process that
// authenticates as the ServiceAccount eip, with exactly the daemon's RBAC.
func (c *Cluster) ServiceAccountConfig(ctx context.Context) (*rest.Config, error) {
	token, err := c.ServiceAccountToken(ctx)
	if err != nil {
		return nil, err
	}
	return c.restConfig(rest.TLSClientConfig{CAData: c.pki.caPEM}, token), nil
}

// NodeKubeconfig is the path of the kubeconfig eipd uses on that node: the
// ServiceAccount eip with a token bound to the node's eipd Pod
// (NodeServiceAccountToken).
func (c *Cluster) NodeKubeconfig(node string) string {
	return filepath.Join(c.dir, node+".kubeconfig")
}

func (c *Cluster) writeNodeKubeconfig(ctx context.Context, n *endpoint) error {
	if err := c.createDaemonPod(ctx, n.name); err != nil {
		return err
	}
	token, err := c.NodeServiceAccountToken(ctx, n.name)
	if err != nil {
		return err
	}
	return writeKubeconfig(c.NodeKubeconfig(n.name), c.server(), c.pki.caPEM, kubeconfigUser{token: token})
}

// DaemonPod is the name of the Pod object that stands for eipd on node.
func DaemonPod(node string) string { return "eipd-" + node }

// createDaemonPod creates the Pod object of eipd on node, as the
// DaemonSet's controller would: of the ServiceAccount eip, on that Node.
// No kubelet runs it (eipd runs as a confined process, StartDaemon); it
// exists so that eipd's token is bound to a Pod on a Node, as a kubelet's
// is, and carries the node's name.
func (c *Cluster) createDaemonPod(ctx context.Context, node string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: DaemonPod(node), Namespace: Namespace, Labels: map[string]string{"eip.io/testenv": "eipd"}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: ServiceAccount,
			Containers:         []corev1.Container{{Name: "eipd", Image: "ghcr.io/eip-project/eipd"}},
		},
	}
	if _, err := c.client.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s/%s: %w", Namespace, pod.Name, err)
	}
	return nil
}

// NodeServiceAccountToken requests a token for the ServiceAccount eip
// bound to the Pod of eipd on node, as the kubelet requests the token of a
// DaemonSet's Pod: the API server adds the Pod's Node to it, which
// identifies the node (authentication.kubernetes.io/node-name) to
// admission policies. The token is valid while the Pod exists.
func (c *Cluster) NodeServiceAccountToken(ctx context.Context, node string) (string, error) {
	pod, err := c.client.CoreV1().Pods(Namespace).Get(ctx, DaemonPod(node), metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for eipd on %s: %w", node, err)
	}
	lifetime := int64(tokenLifetime)
	tr, err := c.client.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &lifetime,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}},
		metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for %s/%s bound to pod %s: %w", Namespace, ServiceAccount, pod.Name, err)
	}
	return tr.Status.Token, nil
}

// NodeServiceAccountConfig is a client configuration for the test process
// that authenticates as eipd on node does (NodeServiceAccountToken).
func (c *Cluster) NodeServiceAccountConfig(ctx context.Context, node string) (*rest.Config, error) {
	token, err := c.NodeServiceAccountToken(ctx, node)
	if err != nil {
		return nil, err
	}
	return c.restConfig(rest.TLSClientConfig{CAData: c.pki.caPEM}, token), nil
}
