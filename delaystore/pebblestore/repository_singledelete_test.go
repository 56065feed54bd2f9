package pebblestore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
)

// pendingModel is what a model of the repository knows of a pending
// message: its subject, and the copy a dispatcher took when it first read
// it, which a later delete hands back as Op.Pending however the message
// was rewritten since.
type pendingModel struct {
	msg  *delaystore.StoredMessage // as last written
	read *delaystore.StoredMessage // as first read
}

// TestRepository_SingleDeletes_NothingComesBack checks that the
// repository's single deletes never bring a message back: through a
// Pebble store that it flushes and compacts at random, it schedules
// messages (some with a client id that replaces the last), updates their
// attempt counts, moves them within their time bucket and out of it, and
// deletes them, half the time as a dispatcher does with the copy it read
// before those rewrites; after every step of a few, the pending messages
// and the due index hold exactly the model's keys.
func TestRepository_SingleDeletes_NothingComesBack(t *testing.T) {
	s := openEngine(t, "memory")
	r, err := delaystore.OpenRepository(s, delaystore.RepositoryConfig{TimeBucket: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rng := rand.New(rand.NewPCG(38, 2))
	model := make(map[keys.Key]*pendingModel)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for step := range 1000 {
		if err := repoStep(r, rng, model, base); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		switch rng.IntN(60) {
		case 0:
			err = pebblestore.Flush(s)
		case 1:
			err = pebblestore.FlushAndCompact(s)
		}
		if err != nil {
			t.Fatal(err)
		}
		if step%50 == 49 {
			checkRepo(t, r, model, step)
		}
	}
	if err := pebblestore.FlushAndCompact(s); err != nil {
		t.Fatal(err)
	}
	checkRepo(t, r, model, -1)
}

// repoStep makes one write, chosen at random, to r and to model.
func repoStep(r *delaystore.Repository, rng *rand.Rand, model map[keys.Key]*pendingModel, base int64) error {
	k, pm := anyPending(rng, model)
	switch op := rng.IntN(10); {
	case pm == nil || op < 4:
		return schedule(r, rng, model, base)
	case op < 6:
		m := cloneMsg(pm.msg)
		m.Attempt++
		if _, err := r.Apply([]delaystore.Op{{Key: k, Msg: m}}, delaystore.NoSync); err != nil {
			return err
		}
		pm.msg = m
	case op < 7:
		return move(r, rng, model, k, pm)
	default:
		o := delaystore.Op{Key: k}
		if pm.msg.ClientId == "" && rng.IntN(2) == 0 {
			o.Pending = &delaystore.StoredMessage{Subject: pm.read.Subject, ExpireAtNs: pm.read.ExpireAtNs, WrittenOnce: pm.read.WrittenOnce}
		}
		if _, err := r.Apply([]delaystore.Op{o}, delaystore.NoSync); err != nil {
			return err
		}
		delete(model, k)
	}
	return nil
}

// schedule stores a new message, one in five with a client id that
// replaces the message pending with it.
func schedule(r *delaystore.Repository, rng *rand.Rand, model map[keys.Key]*pendingModel, base int64) error {
	m := &delaystore.StoredMessage{
		Subject:  fmt.Sprintf("s.%d", rng.IntN(4)),
		FireAtNs: base + rng.Int64N(int64(20*time.Second)),
	}
	if rng.IntN(5) == 0 {
		m.ClientId = fmt.Sprintf("c%d", rng.IntN(3))
	}
	out, err := r.Schedule([]*delaystore.StoredMessage{cloneMsg(m)}, delaystore.NoSync)
	if err != nil {
		return err
	}
	if out[0].HasReplaced {
		delete(model, out[0].Replaced)
	}
	read, err := r.Get(out[0].Key)
	if err != nil {
		return err
	}
	model[out[0].Key] = &pendingModel{msg: read, read: read}
	return nil
}

// move gives k a new fire time, in its own time bucket or another.
func move(r *delaystore.Repository, rng *rand.Rand, model map[keys.Key]*pendingModel, k keys.Key, pm *pendingModel) error {
	fireAt := pm.msg.FireAtNs - pm.msg.FireAtNs%int64(time.Second) + rng.Int64N(int64(time.Second))
	if rng.IntN(2) == 0 {
		fireAt += int64(rng.IntN(3)-1) * int64(time.Second)
	}
	out, err := r.Move(k, func(*delaystore.StoredMessage) (int64, error) { return fireAt, nil }, "", delaystore.NoSync)
	if err != nil {
		return err
	}
	delete(model, k)
	m, err := r.Get(out.Key)
	if err != nil {
		return err
	}
	read := pm.read
	if out.Key != k {
		read = m
	}
	model[out.Key] = &pendingModel{msg: m, read: read}
	return nil
}

// anyPending picks a pending message of model at random, or none.
func anyPending(rng *rand.Rand, model map[keys.Key]*pendingModel) (keys.Key, *pendingModel) {
	if len(model) == 0 {
		return keys.Key{}, nil
	}
	i := rng.IntN(len(model))
	for k, pm := range model {
		if i == 0 {
			return k, pm
		}
		i--
	}
	panic("unreachable")
}

func cloneMsg(m *delaystore.StoredMessage) *delaystore.StoredMessage {
	return &delaystore.StoredMessage{Subject: m.Subject, FireAtNs: m.FireAtNs, ClientId: m.ClientId, Attempt: m.Attempt}
}

// checkRepo checks that r's messages, by subject, and its due index hold
// exactly the keys of model.
func checkRepo(t *testing.T, r *delaystore.Repository, model map[keys.Key]*pendingModel, step int) {
	t.Helper()
	stored := make(map[keys.Key]bool)
	for i := range 4 {
		err := r.ScanTopic(keys.TopicHash(fmt.Sprintf("s.%d", i)), nil, nil, func(k keys.Key, _ *delaystore.StoredMessage) bool {
			stored[k] = true
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	due := make(map[keys.Key]bool)
	if err := r.ScanDue(nil, ^uint64(0), func(k keys.Key) bool { due[k] = true; return true }); err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]map[keys.Key]bool{"message": stored, "due entry": due} {
		for k := range got {
			if model[k] == nil {
				_, err := r.Get(k)
				t.Fatalf("after step %d: %s %v is back after its delete (Get: %v)", step, what, k, err)
			}
		}
		if len(got) != len(model) {
			t.Fatalf("after step %d: %d of %d pending messages have a %s", step, len(got), len(model), what)
		}
	}
	for k := range model {
		if _, err := r.Get(k); errors.Is(err, delaystore.ErrNotFound) {
			t.Fatalf("after step %d: pending message %v is gone", step, k)
		}
	}
}
