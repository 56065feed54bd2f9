package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// clusterCertsCmd makes what a TLS cluster needs: a CA for the cluster and
// a certificate per node that it signed. For a test cluster, or to see
// the shape; an operator with a PKI issues them there instead.
type clusterCertsCmd struct {
	Dir   string   `name:"dir" help:"Directory to write the PEM files to: ca.pem and ca-key.pem (kept and reused if they exist), and <node-id>.pem and <node-id>-key.pem per node." default:"cluster-certs" type:"path" env:"-"`
	Hosts []string `name:"hosts" help:"Host names and IP addresses to name in every node certificate, for tools that check them (the nodes check only the CA)." placeholder:"HOST" env:"-"`
	Days  int      `name:"days" help:"How long the node certificates are valid; the CA lasts ten years." default:"825" env:"-"`

	Nodes []string `arg:"" name:"node-id" help:"The --node-id of each node to make a certificate for."`
}

// caValidity is how long a CA that cluster certs makes is valid.
const caValidity = 10 * 365 * 24 * time.Hour

func (c *clusterCertsCmd) check() error {
	var p problems
	for _, id := range c.Nodes {
		if !nodeIDPattern.MatchString(id) {
			p.add("node id %q: want 1 to 64 letters, digits, dots, dashes or underscores, starting with a letter or digit", id)
		}
	}
	if c.Days < 1 {
		p.add("--days %d: want at least 1", c.Days)
	}
	return p.err()
}

func (c *clusterCertsCmd) Run(e *env) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	ca, caKey, made, err := c.loadOrMakeCA()
	if err != nil {
		return err
	}
	if made {
		fmt.Fprintf(e.stdout, "made the cluster CA: %s (its key %s: keep it off the nodes)\n", filepath.Join(c.Dir, "ca.pem"), filepath.Join(c.Dir, "ca-key.pem"))
	} else {
		fmt.Fprintf(e.stdout, "signing with the cluster CA in %s\n", filepath.Join(c.Dir, "ca.pem"))
	}
	for _, id := range c.Nodes {
		if err := c.makeNode(id, ca, caKey); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "node %s: --cluster-tls-cert %s --cluster-tls-key %s --cluster-tls-ca %s\n", id,
			filepath.Join(c.Dir, id+".pem"), filepath.Join(c.Dir, id+"-key.pem"), filepath.Join(c.Dir, "ca.pem"))
	}
	return nil
}

// loadOrMakeCA reads the CA in Dir, or makes one there if there is none.
func (c *clusterCertsCmd) loadOrMakeCA() (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	certPath, keyPath := filepath.Join(c.Dir, "ca.pem"), filepath.Join(c.Dir, "ca-key.pem")
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	switch {
	case err == nil:
		ca, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return nil, nil, false, fmt.Errorf("%s: %w", certPath, err)
		}
		key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
		if !ok || !ca.IsCA {
			return nil, nil, false, fmt.Errorf("%s is not a CA with an ECDSA key that cluster certs made", certPath)
		}
		return ca, key, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, false, fmt.Errorf("the cluster CA in %s: %w", c.Dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "natsdelay cluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, false, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, false, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, false, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, true, err
}

// makeNode writes the certificate and key of node id, signed by ca: good
// for both ends of a connection, since a node accepts and dials.
func (c *clusterCertsCmd) makeNode(id string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Duration(c.Days) * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{id},
	}
	for _, h := range c.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(c.Dir, id+".pem"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(c.Dir, id+"-key.pem"), key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM writes one PEM block to path with mode perm, replacing a file
// that is there.
func writePEM(path, kind string, der []byte, perm os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, data, perm); err != nil {
		return err
	}
	return os.Chmod(path, perm) // an existing file keeps its mode otherwise
}
