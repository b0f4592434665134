package peer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"
)

// With Config.TLS every node serves HTTPS with a certificate it makes at
// start, which nobody has to sign: a node proves that its certificate is
// the job's by answering the plan request, which carries a fresh nonce,
// with an HMAC under the job's key of the certificate's fingerprint and
// the nonce. The asker pins that fingerprint for the address and asks for
// ranges only over connections that present it, so the bytes are private
// to the nodes that hold the key and nobody in between can pose as one.

const (
	certHeader  = "X-Ferry-Cert"
	proofHeader = "X-Ferry-Cert-Proof"
)

// useTLS makes this node's certificate, serves with it, and asks its
// peers over TLS through tr.
func (n *Node) useTLS(tr *http.Transport) error {
	cert, fp, err := selfCert()
	if err != nil {
		return fmt.Errorf("peer: make a certificate: %w", err)
	}
	n.certFP = fp
	n.ln = tls.NewListener(n.ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	tr.DialTLSContext = n.dialTLS
	return nil
}

// selfCert makes this node's certificate and returns its fingerprint.
func selfCert() (tls.Certificate, string, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "ferry peer"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, fingerprint(der), nil
}

func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// certProof ties a certificate's fingerprint to the job's key for one
// nonce.
func certProof(key []byte, fp, nonce string) string {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "ferry-peer-cert\n%s\n%s", fp, nonce)
	return hex.EncodeToString(h.Sum(nil))
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkCert verifies a plan answer's certificate proof and pins the
// certificate for addr.
func (n *Node) checkCert(addr, nonce string, resp *http.Response) error {
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return errors.New("answered without TLS")
	}
	fp := fingerprint(resp.TLS.PeerCertificates[0].Raw)
	if resp.Header.Get(certHeader) != fp || !hmac.Equal([]byte(resp.Header.Get(proofHeader)), []byte(certProof(n.cfg.Key, fp, nonce))) {
		return errors.New("its certificate is not proven with the job's key")
	}
	n.mu.Lock()
	n.pinned[addr] = fp
	n.mu.Unlock()
	return nil
}

// dialTLS opens a TLS connection to addr that presents the certificate
// pinned for it, or any certificate before one is pinned (the plan
// request, whose answer must prove it).
func (n *Node) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	raw, err := (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, &tls.Config{
		InsecureSkipVerify: true, // checked below: pinned, or proven with the key
		MinVersion:         tls.VersionTLS13,
		VerifyConnection: func(cs tls.ConnectionState) error {
			n.mu.Lock()
			want := n.pinned[addr]
			n.mu.Unlock()
			if want != "" && (len(cs.PeerCertificates) == 0 || fingerprint(cs.PeerCertificates[0].Raw) != want) {
				return fmt.Errorf("peer %s presents another certificate than it proved", addr)
			}
			return nil
		},
	})
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// trusted reports whether ranges may be asked of addr: always without
// TLS; with it, once its certificate is pinned.
func (n *Node) trusted(addr string) bool {
	if !n.cfg.TLS {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pinned[addr] != ""
}
