package janitor_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/janitor"
	"github.com/natsdelay/natsdelay/keys"
)

// fakeIndex is an expiry index in memory: Expire removes what it is given.
type fakeIndex struct {
	mu      sync.Mutex
	expiry  map[keys.Key]int64
	calls   int
	removed chan []keys.Key
	keep    bool // Expire removes nothing, like a remover that cannot dead-letter
}

func (f *fakeIndex) Expired(now int64, limit int) ([]keys.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []keys.Key
	for k, at := range f.expiry {
		if at <= now {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b keys.Key) int { return int(f.expiry[a] - f.expiry[b]) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (f *fakeIndex) Expire(_ context.Context, ks []keys.Key) error {
	f.mu.Lock()
	f.calls++
	if !f.keep {
		for _, k := range ks {
			delete(f.expiry, k)
		}
	}
	f.mu.Unlock()
	if f.removed != nil {
		f.removed <- ks
	}
	return nil
}

func newIndex(n int, expireAt func(i int) int64) *fakeIndex {
	f := &fakeIndex{expiry: map[keys.Key]int64{}}
	for i := range n {
		f.expiry[keys.New(1, 0, uint64(i+1))] = expireAt(i)
	}
	return f
}

// TestJanitor_RunOnce_OnlyExpired checks that a run removes exactly the
// messages whose expiry has passed, in batches, and leaves the rest.
func TestJanitor_RunOnce_OnlyExpired(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	idx := newIndex(2500, func(i int) int64 {
		if i < 2100 {
			return now.UnixNano() - int64(i)
		}
		return now.Add(time.Hour).UnixNano()
	})
	j, err := janitor.New(idx, idx, janitor.Config{BatchSize: 1000, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	n, err := j.RunOnce(context.Background())
	if err != nil || n != 2100 {
		t.Fatalf("RunOnce = %d, %v; want 2100 expired", n, err)
	}
	if len(idx.expiry) != 400 || idx.calls != 3 {
		t.Fatalf("left %d (want 400 unexpired) after %d remover calls (want 3 batches)", len(idx.expiry), idx.calls)
	}
}

// TestJanitor_RunOnce_RemoverKeeps checks that a remover that keeps what it
// is given (a dead letter could not be published) does not make a run spin.
func TestJanitor_RunOnce_RemoverKeeps(t *testing.T) {
	idx := newIndex(10, func(i int) int64 { return int64(i) })
	idx.keep = true
	j, _ := janitor.New(idx, idx, janitor.Config{BatchSize: 5})
	if _, err := j.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if idx.calls != 1 {
		t.Fatalf("remover called %d times, want 1", idx.calls)
	}
}

// TestJanitor_Start_RunsOnInterval checks that a started janitor expires
// messages by itself, and that Close stops it.
func TestJanitor_Start_RunsOnInterval(t *testing.T) {
	idx := newIndex(3, func(int) int64 { return 0 })
	idx.removed = make(chan []keys.Key, 10)
	j, _ := janitor.New(idx, idx, janitor.Config{Interval: time.Millisecond})
	j.Start()
	select {
	case ks := <-idx.removed:
		if len(ks) != 3 {
			t.Fatalf("removed %d, want 3", len(ks))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("janitor never ran")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
}

// TestConfig_Validate checks that every bad setting is reported at once,
// and that New also asks for Source and Remover.
func TestConfig_Validate(t *testing.T) {
	_, err := janitor.New(nil, nil, janitor.Config{Interval: -1, BatchSize: -2})
	if !errors.Is(err, janitor.ErrInvalidConfig) {
		t.Fatalf("New = %v", err)
	}
	for _, want := range []string{"Source", "Remover", "Interval (-1ns)", "BatchSize (-2)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}
