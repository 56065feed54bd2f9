package core_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/delaystore"
)

// commits records the size of each group commit.
type commits struct {
	mu    sync.Mutex
	sizes []int
}

func (c *commits) Committed(batch int, _ time.Duration, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes = append(c.sizes, batch)
}

func (c *commits) StoreFailed()  {}
func (c *commits) ReopenFailed() {}

// A hand-over of several messages reaches the group commit whole: its
// messages are committed together, up to the batch's bound, and each is
// told its outcome, in order. Handed over one by one, the writer, woken by
// the first, may commit it alone.
func TestService_ScheduleOnceAll_CommitsAHandOverTogether(t *testing.T) {
	for _, tc := range []struct {
		maxBatch, n int
		want        []int
	}{
		{maxBatch: 0, n: 100, want: []int{100}},
		{maxBatch: 30, n: 100, want: []int{30, 30, 30, 10}},
	} {
		t.Run(fmt.Sprintf("max %d", tc.maxBatch), func(t *testing.T) {
			c := &commits{}
			s := open(t, memStore(t), newPublisher(), func(cfg *core.Config) { cfg.MaxBatch = tc.maxBatch }, core.WithMetrics(c))
			due := time.Now().Add(time.Hour).UnixNano()
			told := make(chan int, tc.n)
			var os []delaystore.Once
			var dones []core.OnceFunc
			for i := range tc.n {
				os = append(os, delaystore.Once{Msg: &delaystore.StoredMessage{Subject: fmt.Sprintf("burst.%d", i), FireAtNs: due}})
				dones = append(dones, func(_ delaystore.Outcome, err error) {
					if err != nil {
						t.Errorf("message %d: %v", i, err)
					}
					told <- i
				})
			}
			if err := s.ScheduleOnceAll(os, dones); err != nil {
				t.Fatalf("ScheduleOnceAll: %v", err)
			}
			for want := range tc.n {
				select {
				case got := <-told:
					if got != want {
						t.Fatalf("told message %d, want %d", got, want)
					}
				case <-time.After(wait):
					t.Fatalf("message %d never told", want)
				}
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if !slices.Equal(c.sizes, tc.want) {
				t.Fatalf("commits of %v, want %v", c.sizes, tc.want)
			}
		})
	}
}

// A hand-over whose messages and dones do not pair up is refused, and
// nothing of it is taken.
func TestService_ScheduleOnceAll_RefusesUnpaired(t *testing.T) {
	c := &commits{}
	s := open(t, memStore(t), newPublisher(), nil, core.WithMetrics(c))
	m := &delaystore.StoredMessage{Subject: "a", FireAtNs: time.Now().Add(time.Hour).UnixNano()}
	if err := s.ScheduleOnceAll([]delaystore.Once{{Msg: m}}, nil); err == nil {
		t.Fatal("one message, no done: taken")
	}
	schedule(t, s, &delaystore.StoredMessage{Subject: "b", FireAtNs: time.Now().Add(time.Hour).UnixNano()})
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Equal(c.sizes, []int{1}) {
		t.Fatalf("commits of %v, want [1]", c.sizes)
	}
}
