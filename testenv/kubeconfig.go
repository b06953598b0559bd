package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
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
// ServiceAccount eip with a token of its own.
func (c *Cluster) NodeKubeconfig(node string) string {
	return filepath.Join(c.dir, node+".kubeconfig")
}

func (c *Cluster) writeNodeKubeconfig(ctx context.Context, n *endpoint) error {
	token, err := c.ServiceAccountToken(ctx)
	if err != nil {
		return err
	}
	return writeKubeconfig(c.NodeKubeconfig(n.name), c.server(), c.pki.caPEM, kubeconfigUser{token: token})
}
