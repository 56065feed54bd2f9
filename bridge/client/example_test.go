package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// runService runs a nats-server on a free port and natsdelay on it, with
// a store in memory, and returns a connection of the example's own and
// what stops them all.
func runService() (*nats.Conn, func()) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	st, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	svcConn, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	var cfg bridge.Config
	cfg.Logger = slog.New(slog.DiscardHandler)
	svc, err := bridge.New(svcConn, st, cfg)
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	return nc, func() {
		nc.Close()
		if err := svc.Close(); err != nil {
			log.Print(err)
		}
		svcConn.Close()
		srv.Shutdown()
	}
}

// newExampleClient is a client of nc with the default options.
func newExampleClient(nc *nats.Conn) *client.Client {
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// The README's "From Go": schedule a message in 30 minutes, consume the
// subject. The code between the markers is the README's, word for word
// (TestReadme_GoExampleIsTheClients holds them together).
func Example() {
	nc, stop := runService()
	defer stop()
	ctx := context.Background()

	// README begins
	c, err := client.New(nc, client.WithRetry(5, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}

	// Consume: Ack settles; Nak, InProgress and Term are the other answers.
	client.Subscribe(nc, "orders.reminder", func(d client.Delivery) {
		log.Printf("attempt %d: %s", d.Attempt(), d.Data())
		d.Ack()
	})

	// Schedule: it returns once the message is durable. A message the
	// service refuses is an error: errors.Is(err, wire.ErrBadRequest).
	s, err := c.Schedule(ctx, client.Message{
		Subject: "orders.reminder",
		Data:    []byte(`{"order":42}`),
		Delay:   30 * time.Minute,
		ID:      "order-42", // scheduling it again replaces it: safe to retry
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("due at %v, tag %s", s.FireAt, s.Tag)
	// README ends

	m, err := c.Get(ctx, wire.MessageRef{Subject: "orders.reminder", ID: "order-42"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Subject, m.ID, m.Tag == s.Tag)
	// Output: orders.reminder order-42 true
}

// A delivery and its answer: the consumer sees the attempt and the
// payload, and AckSync returns once the service has deleted the message.
func ExampleSubscribe() {
	nc, stop := runService()
	defer stop()
	ctx := context.Background()
	c := newExampleClient(nc)

	done := make(chan struct{})
	sub, err := client.Subscribe(nc, "mail.welcome", func(d client.Delivery) {
		fmt.Printf("attempt %d: %s\n", d.Attempt(), d.Data())
		if err := d.AckSync(ctx); err != nil {
			log.Fatal(err)
		}
		close(done)
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Schedule(ctx, client.Message{Subject: "mail.welcome", Data: []byte("hello"), Delay: 10 * time.Millisecond}); err != nil {
		log.Fatal(err)
	}
	<-done
	info, err := c.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pending:", info.Counts.Pending)
	// Output:
	// attempt 1: hello
	// pending: 0
}

// An error answer is a *wire.ServiceError, comparable with errors.Is.
func ExampleClient_Schedule_badRequest() {
	nc, stop := runService()
	defer stop()
	c := newExampleClient(nc)
	_, err := c.Schedule(context.Background(), client.Message{Subject: "reports.daily", Cron: "0 0 30 2 *"})
	fmt.Println(errors.Is(err, wire.ErrBadRequest), client.IsRetryable(err))
	// Output: true false
}

// The pending messages of a subject, walked in fire order across pages.
func ExampleClient_List() {
	nc, stop := runService()
	defer stop()
	ctx := context.Background()
	c := newExampleClient(nc)
	at := time.Now().Add(time.Hour)
	for i := range 3 {
		if _, err := c.Schedule(ctx, client.Message{Subject: "reminders", ID: fmt.Sprint("r", i), At: at.Add(time.Duration(i) * time.Minute)}); err != nil {
			log.Fatal(err)
		}
	}
	one := 1
	for m, err := range c.List(ctx, wire.ListRequest{Subject: "reminders", Limit: &one}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(m.ID)
	}
	// Output:
	// r0
	// r1
	// r2
}

// A recurring schedule, named by its ID, and read back with Get.
func ExampleClient_Schedule_recurring() {
	nc, stop := runService()
	defer stop()
	ctx := context.Background()
	c := newExampleClient(nc)
	_, err := c.Schedule(ctx, client.Message{
		Subject: "reports.daily", Data: []byte(`{}`), ID: "daily-report",
		Cron: "0 9 * * MON-FRI", Zone: "Europe/Berlin", Limit: 10,
	})
	if err != nil {
		log.Fatal(err)
	}
	m, err := c.Get(ctx, wire.MessageRef{Subject: "reports.daily", ID: "daily-report"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Schedule.Spec, "in", m.Schedule.Zone, "at most", m.Schedule.Limit, "times")
	// Output: 0 9 * * MON-FRI in Europe/Berlin at most 10 times
}

// Cancel by subject and ID; a second cancel finds nothing pending.
func ExampleClient_Cancel() {
	nc, stop := runService()
	defer stop()
	ctx := context.Background()
	c := newExampleClient(nc)
	if _, err := c.Schedule(ctx, client.Message{Subject: "orders.reminder", ID: "order-42", Delay: time.Hour}); err != nil {
		log.Fatal(err)
	}
	ref := wire.MessageRef{Subject: "orders.reminder", ID: "order-42"}
	fmt.Println(c.Cancel(ctx, ref))
	fmt.Println(errors.Is(c.Cancel(ctx, ref), wire.ErrNotFound))
	// Output:
	// <nil>
	// true
}

// With no service on the server, a request gets no responders: nothing
// received it, and asking again may pass.
func ExampleIsRetryable() {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	_, err = newExampleClient(nc).Schedule(context.Background(), client.Message{Subject: "orders.reminder", Delay: time.Minute})
	fmt.Println(errors.Is(err, nats.ErrNoResponders), client.IsRetryable(err))
	// Output: true true
}
