package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the per-run certificate authority and the credentials made from it.
// Every file is PEM; the paths are what the control plane's flags name.
type pki struct {
	caCert, caKey         string
	serverCert, serverKey string
	adminCert, adminKey   string
	saKey, saPub          string
	// PEM bytes for kubeconfigs and the test's own client.
	caPEM, adminCertPEM, adminKeyPEM []byte
}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newPKI writes a CA, the API server's serving certificate, an admin client
// certificate (group system:masters) and the service-account signing key
// into dir.
func newPKI(dir string, serverIPs []net.IP, serverNames []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	p := &pki{
		caCert: filepath.Join(dir, "ca.crt"), caKey: filepath.Join(dir, "ca.key"),
		serverCert: filepath.Join(dir, "apiserver.crt"), serverKey: filepath.Join(dir, "apiserver.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"),
	}
	ca, caPEM, caKeyPEM, err := newCA()
	if err != nil {
		return nil, err
	}
	p.caPEM = caPEM
	serverPEM, serverKeyPEM, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: serverIPs,
		DNSNames:    serverNames,
	})
	if err != nil {
		return nil, err
	}
	p.adminCertPEM, p.adminKeyPEM, err = ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "testenv-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	files := map[string][]byte{
		p.caCert: caPEM, p.caKey: caKeyPEM,
		p.serverCert: serverPEM, p.serverKey: serverKeyPEM,
		p.adminCert: p.adminCertPEM, p.adminKey: p.adminKeyPEM,
		p.saKey: saKeyPEM, p.saPub: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return p, nil
}

func newCA() (*issuer, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "eip-testenv-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if err := fillValidity(tmpl); err != nil {
		return nil, nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return &issuer{cert: cert, key: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

// issue signs tmpl with a fresh key and returns the certificate and key PEM.
func (ca *issuer) issue(tmpl *x509.Certificate) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key for %s: %w", tmpl.Subject.CommonName, err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if err := fillValidity(tmpl); err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

// fillValidity gives a certificate a random serial and a validity that
// tolerates clock skew and outlives any run.
func fillValidity(tmpl *x509.Certificate) error {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return fmt.Errorf("generate serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(30 * 24 * time.Hour)
	return nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
