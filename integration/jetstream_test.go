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

	"natsdelay/bridge"
	"natsdelay/bridge/bridgetest"
)

// streamHarness is a server with JetStream, a Service on it with a short
// ack wait, and a JetStream client.
type streamHarness struct {
	svc *bridge.Service
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newStreamHarness(t *testing.T) *streamHarness {
	t.Helper()
	dir := t.TempDir()
	srv := startServerWith(t, func(o *server.Options) {
		o.JetStream = true
		o.StoreDir = dir
	})
	svc := bridgetest.Start(t, srv, bridgetest.MemStore(t), func(c *bridge.Config) {
		c.AckWait = 500 * time.Millisecond
		c.NoRespondersBackoff = 20 * time.Millisecond
		c.NoRespondersMaxBackoff = 100 * time.Millisecond
	})
	nc := connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &streamHarness{svc: svc, nc: nc, js: js}
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
	checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := h.svc.Repository().Pending(); n != 0 {
			return fmt.Errorf("%d pending", n)
		}
		return nil
	})
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
// error: the message stays pending and is delivered again, and once the
// stream has room it is stored and settled.
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
	if n := h.svc.Repository().Pending(); n != 1 {
		t.Fatalf("%d pending after the stream refused it, want 1", n)
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
