package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
)

// streamHarness is a server with JetStream, a Service on it with a short
// ack wait, and a JetStream client.
type streamHarness struct {
	svc *bridge.Service
	reg *prometheus.Registry
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newStreamHarness(t *testing.T) *streamHarness {
	t.Helper()
	dir := t.TempDir()
	srv := startJetStreamServer(t, dir)
	reg := prometheus.NewRegistry()
	svc := bridgetest.Start(t, srv, bridgetest.MemStore(t), func(c *bridge.Config) {
		c.Delivery.AckWait = 500 * time.Millisecond
		c.Delivery.NoRespondersBackoff = 20 * time.Millisecond
		c.Delivery.NoRespondersMaxBackoff = 100 * time.Millisecond
	}, bridge.WithRegisterer(reg))
	nc := connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &streamHarness{svc: svc, reg: reg, nc: nc, js: js}
}

// startJetStreamServer runs a nats-server with JetStream, its streams in dir.
func startJetStreamServer(t *testing.T, dir string) *server.Server {
	t.Helper()
	return startServerWith(t, func(o *server.Options) {
		o.JetStream = true
		o.StoreDir = dir
	})
}

func (h *streamHarness) stream(t *testing.T, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	st, err := h.js.CreateStream(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// msgs is how many messages s holds.
func msgs(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (h *streamHarness) settled(t *testing.T) {
	t.Helper()
	waitPendingWithin(t, h.nc, 0, 30*time.Second)
}

// A delayed message aimed at a subject a work-queue stream captures is
// stored in the stream once, and the stream's PubAck settles it: nothing
// stays pending, nothing is delivered again, and the stream's answer is
// not a bad answer.
func TestJetStream_PubAckSettles_OneMessageInTheStream(t *testing.T) {
	t.Parallel()
	for _, retention := range []jetstream.RetentionPolicy{jetstream.WorkQueuePolicy, jetstream.LimitsPolicy} {
		h := newStreamHarness(t)
		st := h.stream(t, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: retention})
		s := schedule(t, h.nc, newMsg("jobs.x", "work", "Delay", "100ms"))
		h.settled(t)
		if n := msgs(t, st); n != 1 {
			t.Fatalf("%v: the stream holds %d messages, want 1", retention, n)
		}
		m, err := st.GetLastMsgForSubject(context.Background(), "jobs.x")
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get("Nats-Msg-Id"); got != s.Tag {
			t.Fatalf("Nats-Msg-Id %q, want the tag %s", got, s.Tag)
		}
		if st := h.svc.Stats(); st.Redelivered != 0 || st.Acked != 1 {
			t.Fatalf("%v: %d redelivered, %d acked, want 0 and 1", retention, st.Redelivered, st.Acked)
		}
	}
}

// When the stream's PubAck never reaches the service (a stream that does
// not answer, as one whose answer is lost), the service delivers again
// after each ack wait, with the same Nats-Msg-Id, and the stream stores
// the message once: exactly once into the stream.
func TestJetStream_LostPubAck_StoredOnce(t *testing.T) {
	t.Parallel()
	h := newStreamHarness(t)
	st := h.stream(t, jetstream.StreamConfig{Name: "SILENT", Subjects: []string{"silent.>"}, NoAck: true, Duplicates: time.Minute})
	schedule(t, h.nc, newMsg("silent.x", "once", "Delay", "50ms"))
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := h.svc.Stats().Redelivered; n < 3 {
			return fmt.Errorf("%d redeliveries", n)
		}
		return nil
	})
	if n := msgs(t, st); n != 1 {
		t.Fatalf("after 3 redeliveries the stream holds %d messages, want 1", n)
	}
}

// A stream that refuses the message (full, discard new) answers with an
// error: a failed attempt, counted under the stream's err_code (10077,
// maximum messages exceeded) and not as a bad answer; the message stays
// pending and is delivered again, and once the stream has room it is
// stored and settled.
func TestJetStream_StreamError_RetriedUntilStored(t *testing.T) {
	t.Parallel()
	h := newStreamHarness(t)
	st := h.stream(t, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	if _, err := h.js.Publish(context.Background(), "full.first", []byte("fills it")); err != nil {
		t.Fatal(err)
	}
	schedule(t, h.nc, newMsg("full.x", "waits", "Delay", "50ms"))
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := h.svc.Stats().Redelivered; n < 1 {
			return fmt.Errorf("%d redeliveries", n)
		}
		return nil
	})
	if n := pending(t, h.nc); n != 1 {
		t.Fatalf("%d pending after the stream refused it, want 1", n)
	}
	if n := h.svc.Stats().Failed; n < 1 {
		t.Fatalf("%d failed attempts after the stream refused one, want 1 or more", n)
	}
	if n := counterValue(t, h.reg, "natsdelay_jetstream_errors_total", map[string]string{"err_code": "10077"}); n < 1 {
		t.Fatalf(`natsdelay_jetstream_errors_total{err_code="10077"} = %v, want 1 or more`, n)
	}
	if n := counterValue(t, h.reg, "natsdelay_bad_answers_total", map[string]string{"reason": "payload"}); n != 0 {
		t.Fatalf("%v bad answers, want 0: the error was the stream's", n)
	}
	if err := st.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.settled(t)
	if _, err := st.GetLastMsgForSubject(context.Background(), "full.x"); err != nil {
		t.Fatalf("the message is not in the stream once it had room: %v", err)
	}
}

// A stream that does not exist yet: the delivery reaches nobody and backs
// off; once the stream is created, the message is stored once.
func TestJetStream_StreamCreatedLater_StoredOnce(t *testing.T) {
	t.Parallel()
	h := newStreamHarness(t)
	schedule(t, h.nc, newMsg("later.x", "early", "Delay", "50ms"))
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := h.svc.Stats().NoResponders; n < 1 {
			return errors.New("no bounce yet")
		}
		return nil
	})
	st := h.stream(t, jetstream.StreamConfig{Name: "LATER", Subjects: []string{"later.>"}})
	h.settled(t)
	if n := msgs(t, st); n != 1 {
		t.Fatalf("the stream holds %d messages, want 1", n)
	}
}

// wantStoredOnce fails t unless stream name has stored exactly one message
// in all, under the tag of k as its Nats-Msg-Id.
func wantStoredOnce(t *testing.T, js jetstream.JetStream, name string, tag string) {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 1 || info.State.Msgs != 1 {
		t.Fatalf("stream %s: last sequence %d, %d messages; want 1 and 1: the delivery stored once", name, info.State.LastSeq, info.State.Msgs)
	}
	m, err := st.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("Nats-Msg-Id"); got != tag {
		t.Fatalf("stored Nats-Msg-Id %q, want the tag %s", got, tag)
	}
}

// waitInStream waits until stream name has stored a message.
func waitInStream(t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			return err
		}
		info, err := st.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.LastSeq == 0 {
			return errors.New("nothing stored yet")
		}
		return nil
	})
}

// setNoAck turns the stream's PubAcks off (on) or back on (off).
func setNoAck(t *testing.T, js jetstream.JetStream, cfg *jetstream.StreamConfig, on bool) {
	t.Helper()
	cfg.NoAck = on
	if _, err := js.UpdateStream(context.Background(), *cfg); err != nil {
		t.Fatal(err)
	}
}

// Exactly once into a stream through a crash: the real binary delivers to
// a stream that answers nothing (no_ack), so the delivery is in the stream
// and no ACK of it is stored, and is SIGKILLed. Restarted on its data dir,
// natsdelay delivers it again; the stream, answering again, keeps one copy
// (the same Nats-Msg-Id) and its duplicate PubAck settles the message.
func TestJetStream_SIGKILL_StoredOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startJetStreamServer(t, t.TempDir())
	nc := connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, NoAck: true}
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := startProcess(t, bin, srv.ClientURL(), dir)
	rep := schedule(t, nc, newMsg("jobs.x", "job"))
	waitInStream(t, js, "JOBS")
	p.kill(t)
	setNoAck(t, js, &cfg, false)
	p = startProcess(t, bin, srv.ClientURL(), dir)
	defer p.stop(t)
	waitPendingWithin(t, nc, 0, 30*time.Second)
	wantStoredOnce(t, js, "JOBS", rep.Key.Tag())
}

// Exactly once into a stream through a leader change: the leader of three
// delivers into a stream that answers nothing (no_ack) and is killed; the
// new leader delivers the message again, and the stream, answering again,
// keeps one copy and settles it with its duplicate PubAck.
func TestJetStream_LeaderChange_StoredOnce(t *testing.T) {
	srv := startJetStreamServer(t, t.TempDir())
	nodes := startInProcessCluster(t, srv, 3)
	leader := serving(t, nodes)
	nc := connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy, NoAck: true}
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	rep := scheduleInCluster(t, nc, newMsg("jobs.x", "job"))
	waitInStream(t, js, "JOBS")
	leader.kill(t)
	setNoAck(t, js, &cfg, false)
	serving(t, nodes)
	// GET is answered by whichever node leads now.
	checkFor(t, time.Minute, 20*time.Millisecond, func() error { return isGone(nc, rep.Key) })
	st, err := js.Stream(context.Background(), "JOBS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 1 {
		t.Fatalf("stream JOBS: last sequence %d, want 1: the delivery stored once", info.State.LastSeq)
	}
}
