package raftstore

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// testCA is a CA that signs node certificates, in memory.
type testCA struct {
	t    testing.TB
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{t: t, cert: cert, key: key, pool: pool}
}

// node returns the TLS configuration of a member with a certificate this
// CA signed.
func (ca *testCA) node(id string) *tls.Config {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: id},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return clusterTLS(tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, ca.pool)
}

func startTLSCluster(t *testing.T, ca *testCA) *testCluster {
	t.Helper()
	cfg := testConfig()
	cfg.TLS = ca.node("member")
	return startCluster(t, 3, enginePebble, cfg)
}

// attacker speaks hashicorp/raft's own protocol to a node, as any process
// that reaches the cluster port can: its transport dials with conf (nil:
// plain TCP) and says it speaks Raft.
type attacker struct {
	conf   *tls.Config
	closed chan struct{}
	once   sync.Once
}

func (a *attacker) Accept() (net.Conn, error) {
	<-a.closed
	return nil, net.ErrClosed
}

func (a *attacker) Close() error {
	a.once.Do(func() { close(a.closed) })
	return nil
}

func (a *attacker) Addr() net.Addr { return advertisedAddr("127.0.0.1:1") }

func (a *attacker) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := dialPeer(string(addr), timeout, a.conf)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{protoRaft}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func newAttacker(t *testing.T, conf *tls.Config) *raft.NetworkTransport {
	t.Helper()
	tr := raft.NewNetworkTransport(&attacker{conf: conf, closed: make(chan struct{})}, 1, time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// forgeEmptySnapshot sends target an InstallSnapshot of an empty store at a
// term and index beyond the cluster's: accepted, it would replace the
// node's store with nothing.
func forgeEmptySnapshot(t *testing.T, tr *raft.NetworkTransport, target *testNode) error {
	st := target.node.Status()
	var resp raft.InstallSnapshotResponse
	empty := encodeEmptySnapshot(t)
	req := &raft.InstallSnapshotRequest{
		RPCHeader:       raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("forger"), Addr: []byte("127.0.0.1:1")},
		SnapshotVersion: raft.SnapshotVersionMax,
		Term:            st.Term + 100, Leader: []byte("127.0.0.1:1"),
		LastLogIndex: st.LastLogIndex + 1000, LastLogTerm: st.Term + 100,
		Size: int64(len(empty)),
		// The membership as it stands, so that the node takes the rest.
		Configuration:      raft.EncodeConfiguration(target.node.raft.GetConfiguration().Configuration()),
		ConfigurationIndex: st.LastLogIndex,
	}
	return tr.InstallSnapshot(raft.ServerID(target.id), raft.ServerAddress(target.addr), req, &resp, bytes.NewReader(empty))
}

// encodeEmptySnapshot is a snapshot of a store with no keys, as Persist
// writes one.
func encodeEmptySnapshot(t *testing.T) []byte {
	t.Helper()
	empty, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	it, err := empty.NewIter(delaystore.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var buf bytes.Buffer
	if err := (&snapshot{it: it}).write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Mutual TLS on the cluster port: a cluster whose nodes hold certificates
// from one CA forms, elects and replicates as without it.
func TestCluster_TLS_Replicates(t *testing.T) {
	t.Parallel()
	c := startTLSCluster(t, newTestCA(t))
	c.commitOnLeader("k1", "v1", "k2", "v2")
	leader := c.appliedEverywhere()
	for _, n := range c.nodes {
		if n != leader {
			sameContent(t, n.id, n.local, leader.local)
		}
	}
}

// A forged InstallSnapshot of an empty store, sent with hashicorp/raft's
// own transport by a peer without a certificate, or with one from another
// CA, is refused in the handshake: every node keeps its data, and the
// cluster its leader and term.
func TestTransport_ForgedInstallSnapshot_RefusedWithoutMembership(t *testing.T) {
	t.Parallel()
	c := startTLSCluster(t, newTestCA(t))
	c.commitOnLeader("acknowledged", "message")
	leader := c.appliedEverywhere()
	term := leader.node.Status().Term

	for name, conf := range map[string]*tls.Config{
		"no TLS":                        nil,
		"a certificate from another CA": newTestCA(t).node("forger"),
	} {
		tr := newAttacker(t, conf)
		for _, n := range c.nodes {
			if err := forgeEmptySnapshot(t, tr, n); err == nil {
				t.Fatalf("%s: a forged snapshot to %s was taken", name, n.id)
			}
		}
	}
	for _, n := range c.nodes {
		v, err := n.local.Get([]byte("acknowledged"))
		if err != nil || string(v) != "message" {
			t.Fatalf("%s lost its data: %q, %v", n.id, v, err)
		}
	}
	if st := c.waitLeader().node.Status(); st.Term != term {
		t.Fatalf("term moved from %d to %d", term, st.Term)
	}
}

// Forged AppendEntries with a higher term, from a peer that is not a
// member, do not depose the leader: they never reach Raft.
func TestTransport_ForgedTermBump_RefusedWithoutMembership(t *testing.T) {
	t.Parallel()
	c := startTLSCluster(t, newTestCA(t))
	leader := c.waitLeader()
	term := leader.node.Status().Term
	tr := newAttacker(t, nil)
	for i := range 20 {
		for _, n := range c.nodes {
			var resp raft.AppendEntriesResponse
			req := &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("forger"), Addr: []byte("127.0.0.1:1")},
				Term:      term + uint64(100+i),
			}
			if err := tr.AppendEntries(raft.ServerID(n.id), raft.ServerAddress(n.addr), req, &resp); err == nil {
				t.Fatalf("a forged AppendEntries to %s was answered: %+v", n.id, resp)
			}
		}
	}
	if got := c.waitLeader(); got != leader || got.node.Status().Term != term {
		t.Fatalf("leader %s term %d, want %s term %d", got.id, got.node.Status().Term, leader.id, term)
	}
}

// Identify over a TLS cluster port tells a peer that is not a member
// nothing: without a certificate from the CA the handshake fails before
// the node reads the protocol byte, and nothing is written back.
func TestTransport_Identify_TellsNonMembersNothing(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	c := startTLSCluster(t, ca)
	n := c.nodes[0]

	if _, err := identify(n.addr, 2*time.Second, nil); err == nil {
		t.Fatal("identify without TLS answered")
	}
	// Plain bytes, as a scanner would send them: nothing comes back but the
	// TLS alert, and no identity.
	conn, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("I\nwho are you? who are you?\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(conn)
	if bytes.Contains(got, []byte(n.id)) || bytes.Contains(got, []byte("cluster")) {
		t.Fatalf("a plain connection learned %q", got)
	}
	if _, err := identify(n.addr, 2*time.Second, newTestCA(t).node("stranger")); err == nil {
		t.Fatal("identify with a certificate from another CA answered")
	}
	who, err := identify(n.addr, 2*time.Second, ca.node("member"))
	if err != nil || who.ID != n.id {
		t.Fatalf("a member's identify: %+v, %v", who, err)
	}
}

// Without TLS the port is open: the same forged snapshot replaces a
// node's store with nothing. This is what the refusals above prevent, and
// why a cluster on a network needs TLS unless --cluster-insecure says the
// network is closed.
func TestTransport_ForgedInstallSnapshot_TakenOnAPlainPort(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, enginePebble, testConfig())
	c.commitOnLeader("acknowledged", "message")
	c.appliedEverywhere()
	tr := newAttacker(t, nil)
	victim := c.nodes[0]
	if err := forgeEmptySnapshot(t, tr, victim); err != nil {
		t.Fatalf("the forged snapshot was refused on a plain port: %v", err)
	}
	if v, err := victim.local.Get([]byte("acknowledged")); err == nil {
		t.Fatalf("%s still holds %q after a forged empty snapshot", victim.id, v)
	}
}
