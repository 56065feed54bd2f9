package raftstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Mutual TLS on the cluster port.
//
// Whoever speaks Raft to a node can replace its data (an InstallSnapshot
// is a whole new store) or keep the cluster leaderless (a higher term), so
// the port admits only the cluster's members. Membership is a certificate
// signed by the cluster's CA: each node presents its certificate both
// when it accepts and when it dials, and each verifies the other's chain
// against that CA alone. Host names are not checked: members are addressed
// by whatever host:port the operator lists, often IP addresses, and the CA
// is the credential. Use a CA made for the cluster, not one that signs
// anything else. A peer without such a certificate is refused in the
// handshake, before the node reads a byte of Raft or of identify, so it
// learns nothing, not even the node's id.

// LoadTLS reads a node's certificate and key and the cluster's CA, PEM
// files, into the configuration Config.TLS wants: TLS 1.3, the node's
// certificate offered both ways, peers verified against the CA alone.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster TLS certificate %s and key %s: %v", ErrInvalidConfig, certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster TLS CA: %v", ErrInvalidConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: cluster TLS CA %s: no PEM certificate in it", ErrInvalidConfig, caFile)
	}
	return clusterTLS(cert, pool), nil
}

// clusterTLS is the TLS configuration of a node with certificate cert in
// the cluster whose CA is in pool.
func clusterTLS(cert tls.Certificate, pool *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// Accepting: the dialer must show a certificate from the CA.
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  pool,
		// Dialing: the chain is checked against the CA in
		// VerifyConnection, without the host name check (see above).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyMember(cs.PeerCertificates, pool)
		},
	}
}

// verifyMember checks that chain, as a peer presented it, leads to the
// cluster's CA.
func verifyMember(chain []*x509.Certificate, pool *x509.CertPool) error {
	if len(chain) == 0 {
		return errors.New("raftstore: the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("raftstore: the peer's certificate is not from the cluster's CA: %w", err)
	}
	return nil
}

// handshakeTimeout bounds a TLS handshake on the cluster port, either way.
const handshakeTimeout = 5 * time.Second

// serverTLS runs the handshake of an accepted connection, within
// handshakeTimeout.
func serverTLS(c net.Conn, conf *tls.Config) (net.Conn, error) {
	tc := tls.Server(c, conf)
	if err := handshake(tc); err != nil {
		return nil, err
	}
	return tc, nil
}

// clientTLS runs the handshake of a dialed connection, within
// handshakeTimeout.
func clientTLS(c net.Conn, conf *tls.Config) (net.Conn, error) {
	tc := tls.Client(c, conf)
	if err := handshake(tc); err != nil {
		return nil, err
	}
	return tc, nil
}

func handshake(tc *tls.Conn) error {
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return err
	}
	return tc.SetDeadline(time.Time{})
}

// dialPeer opens a connection to a peer's cluster port, over TLS when
// conf is set.
func dialPeer(addr string, timeout time.Duration, conf *tls.Config) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil || conf == nil {
		return c, err
	}
	tc, err := clientTLS(c, conf)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("raftstore: TLS with %s: %w", addr, err)
	}
	return tc, nil
}
