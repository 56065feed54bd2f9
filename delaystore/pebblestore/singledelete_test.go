package pebblestore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// keyModel is what a model of the store knows of one key: its value, and
// how many times it was set, which says whether a SingleDelete may remove
// it.
type keyModel struct {
	value   string
	present bool
	sets    int // sets since the key began
}

// TestStore_SingleDelete_Model checks that SingleDelete, used only on keys
// set once since the store began, removes them for good, through flushes
// and compactions, among keys that are set, deleted and set again and
// removed with Delete: every read agrees with a model after every step.
// A single delete of a key set twice shows here as the first value
// coming back after a compaction (see TestStore_SingleDelete_OfKeySetTwice).
func TestStore_SingleDelete_Model(t *testing.T) {
	// NB: fewer steps on disk, where every flush and compaction syncs.
	for engine, steps := range map[string]int{"disk": 400, "memory": 2000} {
		t.Run(engine, func(t *testing.T) {
			s := openEngine(t, engine)
			rng := rand.New(rand.NewPCG(38, 1))
			model := make(map[string]*keyModel)
			for step := range steps {
				k := pickKey(rng, model, step)
				if err := modelStep(s, rng, model, k, step); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				switch rng.IntN(100) {
				case 0:
					if err := pebblestore.Flush(s); err != nil {
						t.Fatal(err)
					}
				case 1:
					if err := pebblestore.FlushAndCompact(s); err != nil {
						t.Fatal(err)
					}
				}
				if step%100 == 99 {
					checkModel(t, s, model, step, false)
				}
			}
			if err := pebblestore.FlushAndCompact(s); err != nil {
				t.Fatal(err)
			}
			checkModel(t, s, model, steps, true)
		})
	}
}

// pickKey picks the key of the next step: half the time one of 32 keys
// that are set, deleted and set again, as index entries are; otherwise a
// new key or one already set, as messages are written and then updated
// or deleted.
func pickKey(rng *rand.Rand, model map[string]*keyModel, step int) string {
	if rng.IntN(2) == 0 {
		return fmt.Sprintf("index-%02d", rng.IntN(32))
	}
	if rng.IntN(3) == 0 {
		return fmt.Sprintf("msg-%05d", step)
	}
	// One written a little earlier: most of them were set once.
	back := 1 + rng.IntN(min(step+1, 60))
	return fmt.Sprintf("msg-%05d", step-back)
}

// modelStep sets or deletes k, in s and in model: a key is single-deleted
// only when it was set once since the store began, as the repository does
// for a message's key.
func modelStep(s *pebblestore.Store, rng *rand.Rand, model map[string]*keyModel, k string, step int) error {
	m := model[k]
	if m == nil {
		m = &keyModel{}
		model[k] = m
	}
	b := s.NewBatch()
	defer b.Close()
	var err error
	switch {
	case m.present && rng.IntN(2) == 0 && m.sets == 1:
		err = b.SingleDelete([]byte(k))
		m.present = false
	case m.present && rng.IntN(2) == 0:
		err = b.Delete([]byte(k))
		m.present = false
	default:
		m.value = fmt.Sprintf("v%d", step)
		err = b.Set([]byte(k), []byte(m.value))
		m.present = true
		m.sets++
	}
	if err != nil {
		return err
	}
	return b.Commit(delaystore.NoSync)
}

// checkModel checks s against model with a scan, which a key brought back
// makes find one key too many, and, with all, reads every key with Get.
func checkModel(t *testing.T, s *pebblestore.Store, model map[string]*keyModel, step int, all bool) {
	t.Helper()
	present := 0
	for k, m := range model {
		if m.present {
			present++
		}
		if !all {
			continue
		}
		v, err := s.Get([]byte(k))
		switch {
		case m.present && (err != nil || string(v) != m.value):
			t.Fatalf("after step %d: Get(%s) = %q, %v; want %q", step, k, v, err, m.value)
		case !m.present && !errors.Is(err, delaystore.ErrNotFound):
			t.Fatalf("after step %d: Get(%s) = %q, %v; want it deleted", step, k, v, err)
		}
	}
	n := 0
	err := s.Scan(delaystore.IterOptions{}, func(k, v []byte) bool {
		n++
		if m := model[string(k)]; m == nil || !m.present || m.value != string(v) {
			t.Errorf("after step %d: a scan finds %s = %q, which the model does not hold", step, k, v)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != present {
		t.Fatalf("after step %d: a scan finds %d keys, want %d", step, n, present)
	}
}

// TestStore_SingleDelete_OfKeySetTwice shows why the model above keeps
// SingleDelete to keys set once: on a key set twice, the first set
// compacted down before the second, a single delete that meets the
// second in the memtable's flush brings the first value back.
func TestStore_SingleDelete_OfKeySetTwice(t *testing.T) {
	s := openEngine(t, "disk")
	k := []byte("twice")
	commitOne(t, s, func(b delaystore.Batch) error { return b.Set(k, []byte("first")) })
	if err := pebblestore.FlushAndCompact(s); err != nil {
		t.Fatal(err)
	}
	commitOne(t, s, func(b delaystore.Batch) error { return b.Set(k, []byte("second")) })
	commitOne(t, s, func(b delaystore.Batch) error { return b.SingleDelete(k) })
	if err := pebblestore.Flush(s); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(k); err != nil || string(v) != "first" {
		t.Fatalf("Get = %q, %v; want the first value back, the hazard the repository avoids", v, err)
	}
}

func commitOne(t *testing.T, s delaystore.Store, op func(delaystore.Batch) error) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	if err := op(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(delaystore.NoSync); err != nil {
		t.Fatal(err)
	}
}

func openEngine(t *testing.T, engine string) *pebblestore.Store {
	if engine == "memory" {
		return open(t, pebblestore.Config{InMemory: true})
	}
	return open(t, pebblestore.Config{Dir: t.TempDir() + "/pebble"})
}
