package delaystore_test

import (
	"strconv"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// Memory after a burst: a batch on many subjects grows the map of count
// changes a write keeps between batches, and a cleared map keeps its
// buckets, so the repository replaces it rather than hold that size for
// good; a batch on few subjects keeps reusing it.
func TestRepository_ScratchDeltas_LetGoAfterManySubjects(t *testing.T) {
	r, _ := newRepo(t)
	schedule := func(subjects int) {
		t.Helper()
		msgs := make([]*delaystore.StoredMessage, subjects)
		for i := range msgs {
			msgs[i] = msg("burst."+strconv.Itoa(i), t0)
		}
		if _, err := r.Schedule(msgs, delaystore.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	schedule(10)
	small := r.ScratchDeltas()
	schedule(10)
	if got := r.ScratchDeltas(); got != small {
		t.Fatal("a batch of 10 subjects replaced the map it could reuse")
	}
	schedule(5_000)
	if got := r.ScratchDeltas(); got == small {
		t.Fatal("a batch of 5,000 subjects left its grown map in place")
	}
}
