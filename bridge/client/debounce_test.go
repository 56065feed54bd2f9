package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Debounce and DebounceMax become their headers: a second message of the
// burst replaces the first, and with the maximum equal to the debounce it
// is due when the first was.
func TestSchedule_Debounce(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	m := client.Message{Subject: "search.reindex", Data: []byte("1"), ID: "doc-7", Debounce: time.Hour, DebounceMax: time.Hour}
	first, err := c.Schedule(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	m.Data = []byte("2")
	second, err := c.Schedule(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if second.Tag == first.Tag || !second.FireAt.Equal(first.FireAt) {
		t.Fatalf("second %+v, want a new tag due when the first %+v was", second, first)
	}
	info, err := c.Get(ctx, wire.MessageRef{Subject: "search.reindex", ID: "doc-7"})
	if err != nil || info.Tag != second.Tag {
		t.Fatalf("Get = %+v, %v; want the second message", info, err)
	}
}

// Throttle becomes Delay-Throttle: the first message is due at once, the
// next one is held to the end of the window (the first is still pending,
// so it may be on its way), and a third folds into the held one.
func TestSchedule_Throttle(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	m := client.Message{Subject: "alerts.disk", Data: []byte("1"), ID: "host-3", Throttle: time.Hour}
	first, err := c.Schedule(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	m.Data = []byte("2")
	second, err := c.Schedule(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if second.Folded || second.FireAt.Sub(first.FireAt) != time.Hour {
		t.Fatalf("second %+v, want held an hour after the first %+v", second, first)
	}
	m.Data = []byte("3")
	third, err := c.Schedule(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if !third.Folded || !third.FireAt.Equal(second.FireAt) || third.Tag == second.Tag {
		t.Fatalf("third %+v, want folded into the second %+v", third, second)
	}
}
