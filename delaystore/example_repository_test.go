package delaystore_test

import (
	"fmt"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
)

func ExampleRepository_Schedule() {
	s, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	r, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{})
	if err != nil {
		panic(err)
	}
	defer r.Close()

	fireAt := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
	got, err := r.Schedule([]*delaystore.StoredMessage{
		{Subject: "orders.reminder", Payload: []byte(`{"order":42}`), FireAtNs: fireAt.UnixNano(), ClientId: "order-42"},
	}, delaystore.Sync)
	if err != nil {
		panic(err)
	}
	// Scheduling the same Delay-Id again replaces the pending message.
	again, err := r.Schedule([]*delaystore.StoredMessage{
		{Subject: "orders.reminder", Payload: []byte(`{"order":42,"v":2}`), FireAtNs: fireAt.Add(time.Hour).UnixNano(), ClientId: "order-42"},
	}, delaystore.Sync)
	if err != nil {
		panic(err)
	}
	fmt.Println("first id:", got[0].Key.EventID(), "second id:", again[0].Key.EventID())
	fmt.Println("replaced first:", again[0].HasReplaced && again[0].Replaced == got[0].Key)
	fmt.Println("pending:", r.Pending())

	err = r.ScanTopic(keys.TopicHash("orders.reminder"), nil, nil, func(k keys.Key, m *delaystore.StoredMessage) bool {
		fmt.Println(m.Subject, string(m.Payload), time.Unix(0, m.FireAtNs).UTC().Format(time.RFC3339))
		return true
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// first id: 1 second id: 2
	// replaced first: true
	// pending: 1
	// orders.reminder {"order":42,"v":2} 2027-01-15T09:00:00Z
}
