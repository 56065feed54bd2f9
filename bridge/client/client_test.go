package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// The client's tests run against the real service on a real nats-server,
// and each says which promise of the package it checks.

func newClient(t *testing.T, opts ...client.Option) (*bridgetest.Harness, *client.Client) {
	t.Helper()
	h := bridgetest.New(t, nil)
	return h, mustClient(t, h.Conn, opts...)
}

// A message scheduled through the client is stored with every field as
// its control header, and delivered with its headers; the delivery's
// methods read its tag and attempt, and Ack settles it.
func TestSchedule_DeliveredWithItsHeaders(t *testing.T) {
	h, c := newClient(t)
	ctx := context.Background()
	got := make(chan client.Delivery, 1)
	sub, err := client.Subscribe(h.Conn, "orders.reminder", func(d client.Delivery) { got <- d })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	s, err := c.Schedule(ctx, client.Message{
		Subject: "orders.reminder", Data: []byte(`{"order":42}`), Header: nats.Header{"X-Tenant": {"acme"}},
		Delay: 50 * time.Millisecond, ID: "order-42", TTL: time.Hour, MaxDeliver: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Tag == "" || s.Subject != "orders.reminder" || s.FireAt.IsZero() {
		t.Fatalf("Schedule = %+v, want a tag, the subject and a fire time", s)
	}
	info, err := c.Get(ctx, wire.MessageRef{Subject: "orders.reminder", ID: "order-42"})
	if err == nil && (info.Tag != s.Tag || info.MaxDeliver != 3 || info.ExpireAt.IsZero()) {
		err = fmt.Errorf("Get = %+v, want tag %s, max deliver 3 and an expiry", info, s.Tag)
	}
	if err != nil && !errors.Is(err, wire.ErrNotFound) { // delivered already: fine
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d.Tag() != s.Tag || d.Attempt() != 1 || string(d.Data()) != `{"order":42}` || d.Header().Get("X-Tenant") != "acme" || d.FireAt().Before(s.FireAt.Add(-time.Millisecond)) {
			t.Fatalf("delivery tag %s attempt %d data %q tenant %q fire %v; want %s, 1, the payload, acme, %v", d.Tag(), d.Attempt(), d.Data(), d.Header().Get("X-Tenant"), d.FireAt(), s.Tag, s.FireAt)
		}
		if err := d.AckSync(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	if _, err := c.Get(ctx, wire.MessageRef{Tag: s.Tag}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get after AckSync: %v, want a 404: the ACK is committed when AckSync returns", err)
	}
}

// A message the service refuses is an error that matches
// wire.ErrBadRequest and says what is wrong, never a reply taken for a
// success; a cancel of a message that is not pending matches
// wire.ErrNotFound; neither is retryable.
func TestErrors_AreServiceErrors(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	_, err := c.Schedule(ctx, client.Message{Subject: "orders.x", Cron: "* * *"})
	var se *wire.ServiceError
	if !errors.Is(err, wire.ErrBadRequest) || !errors.As(err, &se) || se.Code != 400 || client.IsRetryable(err) {
		t.Fatalf("Schedule with a bad cron: %v, want a 400 *wire.ServiceError, not retryable", err)
	}
	if _, err := c.Schedule(ctx, client.Message{Subject: "orders.*"}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("Schedule to a wildcard: %v, want a 400", err)
	}
	err = c.Cancel(ctx, wire.MessageRef{Subject: "orders.x", ID: "never"})
	if !errors.Is(err, wire.ErrNotFound) || client.IsRetryable(err) {
		t.Fatalf("Cancel of nothing: %v, want a 404, not retryable", err)
	}
	s, err := c.Schedule(ctx, client.Message{Subject: "orders.x", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, wire.MessageRef{Tag: s.Tag}); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := c.Get(ctx, wire.MessageRef{Tag: s.Tag}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get after Cancel: %v, want a 404", err)
	}
}

// With nothing answering, a request fails with nats.ErrNoResponders,
// which is retryable; with WithRetry, Schedule keeps trying and succeeds
// once a service is there, and the message is stored once. No responders
// says that nothing received the message, so a message without an ID is
// retried too.
func TestSchedule_RetriesUntilAServiceAnswers(t *testing.T) {
	for _, id := range []string{"once", ""} {
		t.Run(fmt.Sprintf("id=%q", id), func(t *testing.T) {
			srv := bridgetest.RunServer(t)
			nc := bridgetest.Connect(t, srv)
			ctx := context.Background()
			_, err := mustClient(t, nc).Schedule(ctx, client.Message{Subject: "jobs.x", ID: id})
			if !errors.Is(err, nats.ErrNoResponders) || !client.IsRetryable(err) {
				t.Fatalf("Schedule with no service: %v, want no responders, retryable", err)
			}
			before := inMsgs(t, srv)
			c := mustClient(t, nc, client.WithRetry(1000, time.Millisecond))
			type result struct {
				s   *client.Scheduled
				err error
			}
			done := make(chan result, 1)
			go func() {
				s, err := c.Schedule(ctx, client.Message{Subject: "jobs.x", ID: id, Delay: time.Hour})
				done <- result{s, err}
			}()
			// The service starts once the server has seen two more attempts.
			waitFor(t, "two attempts", func() bool { return inMsgs(t, srv) >= before+2 })
			svc := bridgetest.Start(t, srv, bridgetest.MemStore(t), nil)
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Schedule did not return within 10s of the service starting")
			}
			if r.err != nil {
				t.Fatalf("Schedule with retries: %v", r.err)
			}
			if n := pending(t, svc); n != 1 {
				t.Fatalf("%d pending after retries, want 1", n)
			}
			if id == "" {
				return
			}
			if _, err := c.Schedule(ctx, client.Message{Subject: "jobs.x", ID: id, Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if n := pending(t, svc); n != 1 {
				t.Fatalf("%d pending after scheduling the ID again, want 1: an ID makes a retry replace", n)
			}
		})
	}
}

// pending is the number of messages svc holds, as INFO counts them.
func pending(tb testing.TB, svc *bridge.Service) uint64 {
	tb.Helper()
	info, err := svc.Info()
	if err != nil {
		tb.Fatalf("INFO: %v", err)
	}
	return info.Counts.Pending
}

// inMsgs is the number of messages the server has received.
func inMsgs(tb testing.TB, srv *server.Server) int64 {
	tb.Helper()
	v, err := srv.Varz(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return v.InMsgs
}

// waitFor polls cond until it holds, failing tb after 10s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("no %s within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Without an ID, Schedule is not retried after a 503 or a timeout: the
// message may have been stored before it, and a retry could store it
// twice. The first error is returned.
func TestSchedule_NoRetryWithoutAnID(t *testing.T) {
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	var attempts atomic.Int64
	// A stand-in for a service that is shutting down: every answer a 503.
	watch, err := nc.Subscribe("delay.jobs.x", func(m *nats.Msg) {
		attempts.Add(1)
		r := nats.NewMsg(m.Reply)
		r.Header.Set(wire.HeaderServiceError, "unavailable: shutting down")
		r.Header.Set(wire.HeaderServiceErrorCode, "503")
		_ = nc.PublishMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Unsubscribe() }()
	c := mustClient(t, nc, client.WithRetry(5, time.Millisecond))
	_, err = c.Schedule(context.Background(), client.Message{Subject: "jobs.x"})
	if !errors.Is(err, wire.ErrUnavailable) || attempts.Load() != 1 {
		t.Fatalf("Schedule without an ID: %v after %d attempts, want one 503", err, attempts.Load())
	}
	_, err = c.Schedule(context.Background(), client.Message{Subject: "jobs.x", ID: "a"})
	if !errors.Is(err, wire.ErrUnavailable) || attempts.Load() != 6 {
		t.Fatalf("Schedule with an ID: %v after %d attempts in all, want 503 after 5 more", err, attempts.Load())
	}

	// And a stand-in that takes the message and never answers: a timeout.
	silent, err := nc.SubscribeSync("delay.jobs.silent")
	if err != nil {
		t.Fatal(err)
	}
	received := func() int {
		// NB: the subscription is on the client's connection: once the
		// server answered the flush, it has handed it every attempt.
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := silent.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	c = mustClient(t, nc, client.WithRetry(5, time.Millisecond), client.WithTimeout(20*time.Millisecond))
	_, err = c.Schedule(context.Background(), client.Message{Subject: "jobs.silent"})
	if n := received(); !errors.Is(err, nats.ErrTimeout) || n != 1 {
		t.Fatalf("Schedule without an ID to a silent service: %v after %d attempts, want one timeout", err, n)
	}
	_, err = c.Schedule(context.Background(), client.Message{Subject: "jobs.silent", ID: "a"})
	if n := received(); !errors.Is(err, nats.ErrTimeout) || n != 6 {
		t.Fatalf("Schedule with an ID to a silent service: %v after %d attempts in all, want a timeout after 5 more", err, n)
	}
}

// The iterators walk every page in order, from the cursor given, and stop
// reading pages when the loop breaks.
func TestIterators_WalkEveryPage(t *testing.T) {
	h, c := newClient(t)
	ctx := context.Background()
	base := time.Now().Add(time.Hour)
	var tags []string
	for i := range 7 {
		s, err := c.Schedule(ctx, client.Message{Subject: "pages.a", At: base.Add(time.Duration(i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		tags = append(tags, s.Tag)
		if _, err := c.Schedule(ctx, client.Message{Subject: fmt.Sprintf("pages.s%d", i), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	two := 2
	var listed []string
	for m, err := range c.List(ctx, wire.ListRequest{Subject: "pages.a", Limit: &two}) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, m.Tag)
	}
	if fmt.Sprint(listed) != fmt.Sprint(tags) {
		t.Fatalf("List walked %v, want %v in fire order", listed, tags)
	}
	var subjects []string
	for s, err := range c.Subjects(ctx, wire.SubjectsRequest{Filter: "pages.*", Limit: &two}) {
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, s.Subject)
	}
	if len(subjects) != 8 || subjects[0] != "pages.a" || subjects[7] != "pages.s6" {
		t.Fatalf("Subjects walked %v, want pages.a and pages.s0-6", subjects)
	}
	// The LIST requests the client sends, seen on its own connection.
	lists, err := h.Conn.SubscribeSync(wire.DefaultAPIPrefix + "." + wire.VerbList)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range c.List(ctx, wire.ListRequest{Subject: "pages.a", Limit: &two}) {
		if n++; n == 3 {
			break
		}
	}
	// NB: once the server answered the flush, it has handed the
	// subscription every request the client sent before it.
	if err := h.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if pages, _, err := lists.Pending(); n != 3 || pages != 2 || err != nil {
		t.Fatalf("a loop that broke at 3 saw %d from %d pages (%v), want 3 from 2: no page asked for after the break", n, pages, err)
	}
	_ = lists.Unsubscribe()
	for _, err := range c.List(ctx, wire.ListRequest{Subject: "pages.*"}) {
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("List of a wildcard: %v, want its 400 as the walk's last element", err)
		}
	}
}

// Recurring schedules, limits and INFO through the client: Every makes a
// schedule that SCHEDULES lists; SetLimit, Pause and Resume store and
// return the pattern's limit, a grouped one (of each Tenant) with its
// grouping; Info counts the pending messages.
func TestSchedulesLimitsInfo(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	if _, err := c.Schedule(ctx, client.Message{Subject: "reports.daily", ID: "daily", Cron: "0 9 * * MON-FRI", Zone: "Europe/Berlin", Limit: 3}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for m, err := range c.Schedules(ctx, wire.SchedulesRequest{}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m.Schedule.Name+" "+m.Schedule.Spec+" "+m.Schedule.Zone)
	}
	if fmt.Sprint(names) != "[daily 0 9 * * MON-FRI Europe/Berlin]" {
		t.Fatalf("Schedules = %v", names)
	}
	l, err := c.SetLimit(ctx, wire.Limit{Pattern: "orders.>", MaxInFlight: 100, Rate: 50})
	if err != nil || *l != (wire.Limit{Pattern: "orders.>", MaxInFlight: 100, Rate: 50}) {
		t.Fatalf("SetLimit = %+v, %v", l, err)
	}
	if l, err := c.Pause(ctx, "orders.>"); err != nil || !l.Paused || l.Rate != 50 {
		t.Fatalf("Pause = %+v, %v, want the limit, paused", l, err)
	}
	if l, err := c.Resume(ctx, "orders.>"); err != nil || l.Paused {
		t.Fatalf("Resume = %+v, %v", l, err)
	}
	// A grouped limit: each tenant over every subject, which a pause
	// keeps.
	tenant := wire.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: 50, Rate: 100}
	if l, err := c.SetLimit(ctx, tenant); err != nil || *l != tenant {
		t.Fatalf("SetLimit of each Tenant = %+v, %v", l, err)
	}
	if l, err := c.Pause(ctx, ">"); err != nil || l.KeyHeader != "Tenant" || !l.Paused {
		t.Fatalf("Pause of the tenant limit = %+v, %v, want it paused, of each Tenant", l, err)
	}
	if l, err := c.Resume(ctx, ">"); err != nil || *l != tenant {
		t.Fatalf("Resume of the tenant limit = %+v, %v, want %+v", l, err, tenant)
	}
	if ls, err := c.Limits(ctx); err != nil || len(ls) != 2 || ls[1] != tenant {
		t.Fatalf("Limits = %+v, %v, want orders.> and the tenant limit", ls, err)
	}
	if err := c.DeleteLimit(ctx, ">"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLimit(ctx, "orders.>"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Limit(ctx, "orders.>"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Limit after DeleteLimit: %v, want a 404", err)
	}
	if _, err := c.SetLimit(ctx, wire.Limit{Pattern: "orders..x", Rate: -1}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("SetLimit of a bad pattern: %v, want a 400", err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.Counts.Pending != 1 || info.Counts.Schedules != 1 {
		t.Fatalf("Info = %+v, %v, want 1 pending, 1 schedule", info, err)
	}
	if _, err := c.ClusterStatus(ctx); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("ClusterStatus of a single node: %v, want no responders", err)
	}
}

// A page whose next cursor is the one it was asked with would have a walk
// ask for it forever: the walk ends with an error instead.
func TestIterators_NextThatDoesNotMoveOn_EndsWithError(t *testing.T) {
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	var asked atomic.Int64
	// A stand-in for a service whose pages all name the tag t as next.
	sub, err := nc.Subscribe(wire.DefaultAPIPrefix+"."+wire.VerbList, func(m *nats.Msg) {
		asked.Add(1)
		_ = m.Respond([]byte(`{"subject":"pages.a","messages":[{"tag":"t"}],"next":"t"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var tags []string
	var last error
	for m, err := range mustClient(t, nc).List(context.Background(), wire.ListRequest{Subject: "pages.a"}) {
		if err != nil {
			last = err
			continue
		}
		tags = append(tags, m.Tag)
	}
	if last == nil || len(tags) != 2 || asked.Load() != 2 {
		t.Fatalf("walked %v with %d pages and error %v, want t twice from 2 pages, then an error", tags, asked.Load(), last)
	}
}

// AckSync returns only once the service answered +OK: an answer that is
// neither +OK nor an error answer (something else took the reply subject)
// is an error, since the ACK may not have been applied.
func TestDelivery_AckSync_WantsOK(t *testing.T) {
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	sub, err := nc.Subscribe("not.the.ack.prefix", func(m *nats.Msg) { _ = m.Respond([]byte("hello")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	m := nats.NewMsg("orders.x")
	m.Reply = "not.the.ack.prefix"
	if err := client.NewDelivery(nc, m).AckSync(context.Background()); err == nil || !strings.Contains(err.Error(), `"hello"`) {
		t.Fatalf("AckSync answered hello: %v, want an error naming the answer", err)
	}
}

// Cancel is retried after no responders, which nothing received, and
// reaches the service once it is there; it is not retried after a 503,
// since a retry after an answer that was lost would be told 404.
func TestCancel_RetriedOnlyAfterNoResponders(t *testing.T) {
	srv := bridgetest.RunServer(t)
	nc := bridgetest.Connect(t, srv)
	c := mustClient(t, nc, client.WithRetry(1000, time.Millisecond))
	ref := wire.MessageRef{Subject: "jobs.x", ID: "never"}
	before := inMsgs(t, srv)
	done := make(chan error, 1)
	go func() { done <- c.Cancel(context.Background(), ref) }()
	waitFor(t, "two attempts", func() bool { return inMsgs(t, srv) >= before+2 })
	bridgetest.Start(t, srv, bridgetest.MemStore(t), nil)
	select {
	case err := <-done:
		if !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("Cancel once the service is up: %v, want its 404", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Cancel did not return within 10s of the service starting")
	}

	var attempts atomic.Int64
	busy, err := nc.Subscribe(wire.DefaultAPIPrefix+".BUSY."+wire.VerbCancel, func(m *nats.Msg) {
		attempts.Add(1)
		r := nats.NewMsg(m.Reply)
		r.Header.Set(wire.HeaderServiceError, "unavailable: shutting down")
		r.Header.Set(wire.HeaderServiceErrorCode, "503")
		_ = nc.PublishMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Unsubscribe() }()
	c = mustClient(t, nc, client.WithAPIPrefix(wire.DefaultAPIPrefix+".BUSY"), client.WithRetry(5, time.Millisecond))
	if err := c.Cancel(context.Background(), ref); !errors.Is(err, wire.ErrUnavailable) || attempts.Load() != 1 {
		t.Fatalf("Cancel answered 503: %v after %d attempts, want one", err, attempts.Load())
	}
}
