package integration_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/backup"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// servicePermissions are the permissions docs/security.md gives the
// service's own user: it subscribes to its prefixes, the micro discovery
// subjects and inboxes, and publishes deliveries, dead letters and replies
// anywhere.
func servicePermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{">"}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			"delay.>", "$DELAY.JS.>", "$DELAY.ACK.>", "$DELAY.ACK", "$DELAY.API.>", "$SRV.>", "_INBOX.>",
		}},
	}
}

// runServerWith runs an embedded nats-server with the test defaults as
// changed by mod, shut down when tb ends.
func runServerWith(tb testing.TB, mod func(*server.Options)) *server.Server {
	tb.Helper()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	mod(&opts)
	s := natsserver.RunServer(&opts)
	tb.Cleanup(s.Shutdown)
	return s
}

// connErrs collects a connection's asynchronous errors, which is where the
// server's permission violations arrive.
type connErrs chan error

func (e connErrs) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case e <- err:
		default:
		}
	})
}

// wantViolation waits for the server to report that publishing to subject
// was denied.
func (e connErrs) wantViolation(tb testing.TB, subject string) {
	tb.Helper()
	timeout := time.After(wait)
	for {
		select {
		case err := <-e:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `Publish to "`+subject+`"`) {
				return
			}
			tb.Logf("other connection error: %v", err)
		case <-timeout:
			tb.Fatalf("no permissions violation for publishing to %s within %v", subject, wait)
		}
	}
}

// none fails tb if the connection reported any error.
func (e connErrs) none(tb testing.TB, who string) {
	tb.Helper()
	select {
	case err := <-e:
		tb.Fatalf("%s connection error: %v", who, err)
	default:
	}
}

// connectWith opens a connection to srv with opts, closed when tb ends.
func connectWith(tb testing.TB, srv *server.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(srv.ClientURL(), append([]nats.Option{nats.MaxReconnects(0)}, opts...)...)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// serviceOn runs a Service on nc, which it does not own.
func serviceOn(tb testing.TB, nc *nats.Conn) *bridge.Service {
	tb.Helper()
	return bridgetest.StartOn(tb, nc, memStore(tb), nil)
}

// roundTrip schedules a message due now on nc, receives it on nc, ACKs it
// with an ack sync and waits until it is deleted.
func roundTrip(tb testing.TB, nc *nats.Conn, subject string) {
	tb.Helper()
	ch := subscribe(tb, nc, subject)
	s := schedule(tb, nc, newMsg(subject, "hello"))
	r := next(tb, ch, "delivery")
	if got := tagKey(tb, r.Msg); got != s.Key {
		tb.Fatalf("delivered tag %s, scheduled %s", got, s.Key)
	}
	ackSync(tb, nc, r.Msg, "+ACK")
	waitGone(tb, nc, s.Key)
}

func writeFile(tb testing.TB, dir, name string, data []byte) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// testPKI is a CA and a server and a client certificate it signed, as PEM
// files.
type testPKI struct {
	caFile, certFile, keyFile string
	serverTLS                 *tls.Config
}

// newPKI makes a throwaway CA, a server certificate for 127.0.0.1 and a
// client certificate, and the server's TLS config, which requires and
// verifies client certificates from that CA.
func newPKI(tb testing.TB) testPKI {
	tb.Helper()
	dir := tb.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		return k
	}
	serial := int64(0)
	sign := func(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			tb.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			tb.Fatal(err)
		}
		return c
	}
	certPEM := func(c *x509.Certificate) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	keyPEM := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			tb.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}

	caKey := newKey()
	ca := sign(&x509.Certificate{
		Subject: pkix.Name{CommonName: "natsdelay test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, caKey, nil, nil)
	srvKey := newKey()
	srvCert := sign(&x509.Certificate{
		Subject: pkix.Name{CommonName: "nats-server"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, srvKey, ca, caKey)
	cliKey := newKey()
	cliCert := sign(&x509.Certificate{
		Subject:  pkix.Name{CommonName: "natsdelay"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, cliKey, ca, caKey)

	pair, err := tls.X509KeyPair(certPEM(srvCert), keyPEM(srvKey))
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{
		caFile:   writeFile(tb, dir, "ca.pem", certPEM(ca)),
		certFile: writeFile(tb, dir, "client.pem", certPEM(cliCert)),
		keyFile:  writeFile(tb, dir, "client-key.pem", keyPEM(cliKey)),
		serverTLS: &tls.Config{
			Certificates: []tls.Certificate{pair}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
		},
	}
}

// operatorSetup makes an operator, an account it signed and a user that
// account signed, and returns the server settings for operator mode with a
// memory resolver and the user's credentials file.
func operatorSetup(tb testing.TB) (func(*server.Options), string) {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	opKP, err := nkeys.CreateOperator()
	must(err)
	opPub, err := opKP.PublicKey()
	must(err)
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "test-operator"
	opJWT, err := oc.Encode(opKP)
	must(err)
	oc, err = jwt.DecodeOperatorClaims(opJWT)
	must(err)

	accKP, err := nkeys.CreateAccount()
	must(err)
	accPub, err := accKP.PublicKey()
	must(err)
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "delay"
	accJWT, err := ac.Encode(opKP)
	must(err)

	userKP, err := nkeys.CreateUser()
	must(err)
	userPub, err := userKP.PublicKey()
	must(err)
	uc := jwt.NewUserClaims(userPub)
	uc.Name = "natsdelay"
	userJWT, err := uc.Encode(accKP)
	must(err)
	seed, err := userKP.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	must(err)

	resolver := &server.MemAccResolver{}
	must(resolver.Store(accPub, accJWT))
	return func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver = resolver
	}, writeFile(tb, tb.TempDir(), "user.creds", creds)
}

// TestSecurity_Auth_RoundTrip checks that the service works over every way
// nats.go (and so the binary's flags) can log in: it schedules, delivers
// and takes an ACK on a server that refuses anonymous clients.
func TestSecurity_Auth_RoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (func(*server.Options), []nats.Option)
	}{
		{"user-password", func(t *testing.T) (func(*server.Options), []nats.Option) {
			return func(o *server.Options) {
				o.Users = []*server.User{{Username: "natsdelay", Password: "s3cret"}}
			}, []nats.Option{nats.UserInfo("natsdelay", "s3cret")}
		}},
		{"token", func(t *testing.T) (func(*server.Options), []nats.Option) {
			return func(o *server.Options) { o.Authorization = "t0ken" }, []nats.Option{nats.Token("t0ken")}
		}},
		{"nkey", func(t *testing.T) (func(*server.Options), []nats.Option) {
			kp, err := nkeys.CreateUser()
			if err != nil {
				t.Fatal(err)
			}
			pub, _ := kp.PublicKey()
			seed, _ := kp.Seed()
			opt, err := nats.NkeyOptionFromSeed(writeFile(t, t.TempDir(), "user.nk", seed))
			if err != nil {
				t.Fatal(err)
			}
			return func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} }, []nats.Option{opt}
		}},
		{"creds-jwt", func(t *testing.T) (func(*server.Options), []nats.Option) {
			mod, creds := operatorSetup(t)
			return mod, []nats.Option{nats.UserCredentials(creds)}
		}},
		{"tls-client-cert", func(t *testing.T) (func(*server.Options), []nats.Option) {
			pki := newPKI(t)
			return func(o *server.Options) {
					o.TLS, o.TLSVerify, o.TLSConfig, o.TLSTimeout = true, true, pki.serverTLS, 5
				}, []nats.Option{
					nats.RootCAs(pki.caFile), nats.ClientCert(pki.certFile, pki.keyFile),
				}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mod, opts := tc.setup(t)
			srv := runServerWith(t, mod)
			// The server must really demand the credentials, or the test
			// would pass without them. With TLS, trusting the CA is not
			// enough: the client certificate is what logs in.
			without := [][]nats.Option{nil}
			if tc.name == "tls-client-cert" {
				without = append(without, opts[:1])
			}
			for _, o := range without {
				if nc, err := nats.Connect(srv.ClientURL(), append([]nats.Option{nats.MaxReconnects(0), nats.Timeout(wait)}, o...)...); err == nil {
					nc.Close()
					t.Fatalf("a client with %d of the %d login options got in", len(o), len(opts))
				}
			}
			serviceOn(t, connectWith(t, srv, opts...))
			roundTrip(t, connectWith(t, srv, opts...), "orders.auth")
		})
	}
}

// optionsTemplate builds the users of the docs/security.md template in
// server.Options, as an embedding program would.
func optionsTemplate(o *server.Options) {
	inbox := &server.SubjectPermission{Allow: []string{"_INBOX.>"}}
	publisher := func(subj string) *server.Permissions {
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{subj}}, Subscribe: inbox}
	}
	// NB: in a config file allow_responses also turns off every other
	// publish; in server.Options that takes an empty allow list.
	consumer := func(subj string) *server.Permissions {
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{}},
			Subscribe: &server.SubjectPermission{Allow: []string{subj}},
			Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: 2 * time.Minute},
		}
	}
	user := func(name string, p *server.Permissions) *server.User {
		return &server.User{Username: name, Password: "change-me", Permissions: p}
	}
	o.Users = []*server.User{
		user("natsdelay", servicePermissions()),
		user("orders-api", publisher("delay.orders.>")),
		user("orders-worker", consumer("orders.>")),
		user("billing-api", publisher("delay.billing.>")),
		user("billing-worker", consumer("billing.>")),
		user("ops", &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{"$DELAY.API.>", "$SRV.>"}}, Subscribe: inbox,
			Response: &server.ResponsePermission{MaxMsgs: 1, Expires: 2 * time.Minute}}),
	}
}

// docsTemplate loads the nats-server configuration block of
// docs/security.md, so the documented templates are the ones tested.
func docsTemplate(tb testing.TB) *server.Options {
	tb.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "security.md"))
	if err != nil {
		tb.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```conf\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		tb.Fatal("docs/security.md has no ```conf block")
	}
	opts, err := server.ProcessConfigFile(writeFile(tb, tb.TempDir(), "nats.conf", []byte(block)))
	if err != nil {
		tb.Fatalf("docs/security.md configuration: %v", err)
	}
	return opts
}

// TestSecurity_Permissions_SharedServer checks the permission templates of
// docs/security.md, as written there and as built in server.Options: a
// service limited to its documented permissions works; a consumer that may
// only subscribe to its subjects and answer the messages it gets can ACK
// its own delivery, once, and not another team's; a publisher limited to
// its part of delay.> can schedule only there; and only operators may use
// the API.
func TestSecurity_Permissions_SharedServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  func(t *testing.T) *server.Server
	}{
		{"options", func(t *testing.T) *server.Server { return runServerWith(t, optionsTemplate) }},
		{"docs", func(t *testing.T) *server.Server {
			opts := docsTemplate(t)
			opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
			s := natsserver.RunServer(opts)
			t.Cleanup(s.Shutdown)
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkPermissions(t, tc.srv(t))
		})
	}
}

func checkPermissions(t *testing.T, srv *server.Server) {
	login := func(user string, errs connErrs) *nats.Conn {
		return connectWith(t, srv, nats.UserInfo(user, "change-me"), errs.option())
	}
	svcErrs, pubErrs, consErrs := make(connErrs, 16), make(connErrs, 16), make(connErrs, 16)
	serviceOn(t, login("natsdelay", svcErrs))
	pub := login("orders-api", pubErrs)
	cons := login("orders-worker", consErrs)
	billing := login("billing-api", make(connErrs, 16))
	other := login("billing-worker", make(connErrs, 16))
	ops := login("ops", make(connErrs, 16))

	mine, theirs := subscribe(t, cons, "orders.mine"), subscribe(t, other, "billing.theirs")
	sMine := schedule(t, pub, newMsg("orders.mine", "m"))
	sTheirs := schedule(t, billing, newMsg("billing.theirs", "t"))
	dMine := next(t, mine, "consumer's delivery")
	next(t, theirs, "other consumer's delivery")

	// The consumer holds the other tag (tags are no secret, see
	// TestSecurity_Tag_NotASecret) but may not publish to its ack
	// subject, in either ACK form.
	cons.Publish("$DELAY.ACK."+sTheirs.Tag, []byte("+ACK"))
	consErrs.wantViolation(t, "$DELAY.ACK."+sTheirs.Tag)
	byHeader := nats.NewMsg("$DELAY.ACK")
	byHeader.Header.Set(wire.HeaderTag, sTheirs.Tag)
	cons.PublishMsg(byHeader)
	consErrs.wantViolation(t, "$DELAY.ACK")

	// Its own delivery it may answer, once.
	if err := dMine.Respond([]byte("+ACK")); err != nil {
		t.Fatalf("Respond: %v", err)
	}
	waitGone(t, ops, sMine.Key)
	dMine.Respond([]byte("-NAK"))
	consErrs.wantViolation(t, dMine.Reply)
	// The denied ACKs were sent before the one that was applied, on the
	// same connection, so had the server let them through they would have
	// been applied by now.
	stored(t, ops, sTheirs.Key)

	// The publisher may schedule only under delay.orders.>, and not use
	// the API.
	for _, subj := range []string{"delay.other.x", "delay.billing.theirs"} {
		pub.Publish(subj, []byte("x"))
		pubErrs.wantViolation(t, subj)
	}
	pub.PublishRequest("$DELAY.API.INFO", nats.NewInbox(), nil)
	pubErrs.wantViolation(t, "$DELAY.API.INFO")

	// An operator can.
	rep, err := ops.Request("$DELAY.API.INFO", nil, wait)
	if err != nil {
		t.Fatalf("INFO as operator: %v", err)
	}
	var info wire.InfoReply
	if err := json.Unmarshal(rep.Data, &info); err != nil {
		t.Fatalf("INFO reply %q: %v", rep.Data, err)
	}
	if info.Counts.Pending != 1 {
		t.Fatalf("INFO pending = %d, want 1 (only the other consumer's message)", info.Counts.Pending)
	}
	// And take a backup: it acknowledges each chunk, a response.
	if _, err := backup.Fetch(context.Background(), ops, filepath.Join(t.TempDir(), "ops.backup"), backup.FetchConfig{
		Subject: wire.DefaultAPIPrefix + "." + wire.VerbBackup, ChunkSize: wire.MinBackupChunk, Wait: wait,
	}); err != nil {
		t.Fatalf("backup as operator: %v", err)
	}

	// The service's documented permissions were enough for all of it.
	svcErrs.none(t, "service")
}

// TestSecurity_Tag_NotASecret checks what docs/security.md says about
// tags: a tag is computed from the subject, the fire time and a counter, so
// it can be predicted, and whoever may publish to $DELAY.ACK.> can delete
// any pending message by its tag, also one never delivered. A tag that
// names no message changes nothing. Only publish permissions keep ACKs
// safe.
func TestSecurity_Tag_NotASecret(t *testing.T) {
	srv := runServerWith(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "svc", Password: "p", Permissions: servicePermissions()},
			{Username: "pub", Password: "p", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"delay.>"}}, Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
			{Username: "acker", Password: "p", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"$DELAY.ACK.>"}}, Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
			{Username: "ops", Password: "p", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"$DELAY.API.>"}}, Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
		}
	})
	serviceOn(t, connectWith(t, srv, nats.UserInfo("svc", "p")))
	pub := connectWith(t, srv, nats.UserInfo("pub", "p"))
	acker := connectWith(t, srv, nats.UserInfo("acker", "p"))
	ops := connectWith(t, srv, nats.UserInfo("ops", "p"))

	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	first := schedule(t, pub, newMsg("orders.secret", "1", "Delay-At", at))
	second := schedule(t, pub, newMsg("orders.secret", "2", "Delay-At", at))
	guess := keys.New(first.Key.TopicHash(), first.Key.Bucket(), first.Key.EventID()+1)
	if guess != second.Key {
		t.Fatalf("second tag %s, predicted %s", second.Key, guess)
	}

	// A random tag is a no-op that still answers +OK.
	rep, err := acker.Request("$DELAY.ACK."+keys.New(1, 2, 3).Tag(), []byte("+ACK"), wait)
	if err != nil || string(rep.Data) != "+OK" {
		t.Fatalf("ACK of a random tag: %v, %v", rep, err)
	}
	waitPending(t, ops, 2)

	// The predicted tag deletes a message nobody has seen delivered.
	rep, err = acker.Request("$DELAY.ACK."+guess.Tag(), []byte("+ACK"), wait)
	if err != nil || string(rep.Data) != "+OK" {
		t.Fatalf("ACK of the predicted tag: %v, %v", rep, err)
	}
	waitGone(t, ops, second.Key)
	stored(t, ops, first.Key)
}

// TestSecurity_Ingest_ServicePublishes checks the NB of docs/security.md:
// the service delivers with its own permissions, so a publisher allowed
// delay.> reaches a subject it may not publish to itself, and narrowing the
// service's publish permission stops that. A delivery the server refuses
// gets no "no responders" answer, so it is retried after each ack wait
// until max-deliver dead-letters it.
func TestSecurity_Ingest_ServicePublishes(t *testing.T) {
	const target = "$JS.API.STREAM.DELETE.ORDERS"
	srv := runServerWith(t, func(o *server.Options) {
		narrowed := servicePermissions()
		narrowed.Publish = &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.>", "$KV.>", "$O.>", "$SYS.>"}}
		o.Users = []*server.User{
			{Username: "wide", Password: "p", Permissions: servicePermissions()},
			{Username: "narrow", Password: "p", Permissions: narrowed},
			{Username: "pub", Password: "p", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"delay.>"}}, Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
			{Username: "watch", Password: "p"},
		}
	})
	pubErrs := make(connErrs, 16)
	pub := connectWith(t, srv, nats.UserInfo("pub", "p"), pubErrs.option())
	watch := connectWith(t, srv, nats.UserInfo("watch", "p"))
	got := subscribe(t, watch, target)
	dead := subscribe(t, watch, "dead.letters")

	pub.Publish(target, nil)
	pubErrs.wantViolation(t, target)

	t.Run("wide", func(t *testing.T) {
		svc := serviceOn(t, connectWith(t, srv, nats.UserInfo("wide", "p")))
		s := schedule(t, pub, newMsg(target, "x"))
		if d := next(t, got, "delivery with the service's rights"); tagKey(t, d.Msg) != s.Key {
			t.Fatalf("delivered %s, scheduled %s", tagKey(t, d.Msg), s.Key)
		}
		if err := svc.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("narrow", func(t *testing.T) {
		svcErrs := make(connErrs, 16)
		nc := connectWith(t, srv, nats.UserInfo("narrow", "p"), svcErrs.option())
		var cfg bridge.Config
		cfg.Logger = testLogger(t)
		cfg.Delivery.AckWait, cfg.Delivery.MaxDeliver, cfg.Delivery.DeadLetterSubject = 100*time.Millisecond, 2, "dead.letters"
		svc, err := bridge.New(nc, memStore(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Close() })
		s := schedule(t, pub, newMsg(target, "x"))
		svcErrs.wantViolation(t, target)
		d := next(t, dead, "dead letter")
		if tagKey(t, d.Msg) != s.Key || d.Header.Get(wire.HeaderReason) != "max-deliver" {
			t.Fatalf("dead letter %s with headers %v", tagKey(t, d.Msg), d.Header)
		}
		waitGone(t, watch, s.Key)
		select {
		case r := <-got:
			t.Fatalf("the narrowed service delivered to %s: %v", r.Subject, r.Header)
		default:
		}
	})
}
