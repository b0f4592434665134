// Package tlsca makes a throwaway certificate authority and a server
// certificate for 127.0.0.1, for tests and benchmarks that serve HTTPS on
// loopback (R2 is HTTPS-only) and hand the CA to clients with
// AWS_CA_BUNDLE.
package tlsca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Write creates.
type Files struct{ CA, Cert, Key string }

// Write creates a CA and a server certificate for 127.0.0.1 and localhost
// signed by it, valid for a day, and writes ca.pem, cert.pem and key.pem
// (mode 0600) to dir.
func Write(dir string) (Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ferry s3test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return Files{}, err
	}
	f := Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, "cert.pem"),
		Key:  filepath.Join(dir, "key.pem"),
	}
	for _, w := range []struct {
		path, typ string
		der       []byte
	}{
		{f.CA, "CERTIFICATE", caDER},
		{f.Cert, "CERTIFICATE", srvDER},
		{f.Key, "EC PRIVATE KEY", keyDER},
	} {
		data := pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der})
		if err := os.WriteFile(w.path, data, 0o600); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}
