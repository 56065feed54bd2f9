// Package floor is the least a delay service on core NATS must do for a
// message due at once: take the publish, keep it durably before it
// answers, deliver it with a tag, and forget it at the ACK. The bench
// runs it as a process beside natsdelay's, on the same load, so that
// natsdelay's CPU a message can be read against the floor of the work
// its contract names, not only against the nats-server's.
//
// What the floor does, with the same clients as natsdelay (nats.go) and
// the same engine (Pebble):
//
//   - takes `<ingest>.<subject>` in a queue group, reads its Delay-At
//     header, and writes the message under a 24-byte key (the subject's
//     hash, the fire time, a sequence) and a due entry beside it, in a
//     batch committed with fsync before any of the batch's publishers
//     is answered;
//   - answers the publisher with the tag, and publishes the message to
//     its subject with the delivery headers and a reply subject that
//     names the tag;
//   - at the ACK, single-deletes both keys in a batch without fsync.
//
// What it leaves out is everything else natsdelay does for a message:
// checking the headers, per-subject order against older messages on
// disk, the pending counts, the redelivery of an unanswered delivery,
// limits, metrics. With Store false it keeps nothing: the NATS side
// alone.
package floor

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Config says where the floor serves.
type Config struct {
	URL string `json:"url"`
	// Dir holds the store; with Store false nothing is written.
	Dir   string `json:"dir"`
	Store bool   `json:"store"`
	// Ingest and Ack are the subject prefixes, as natsdelay's
	// --ingest-prefix and --ack-prefix.
	Ingest string `json:"ingest"`
	Ack    string `json:"ack"`
	// Count is a subject the floor answers with how many ACKs it has
	// applied, in decimal.
	Count string `json:"count"`
}

// keyLen is the length of a message's key: the subject's hash, the fire
// time in Unix milliseconds, the sequence.
const keyLen = 24

// duePrefix starts a due entry's key, which is the prefix, then the
// message's key: its fire time first after the hash would not order
// due entries by time, so a real index would lead with the time. The
// floor never reads it; it pays for its write and its delete.
const duePrefix = "due/"

// Serve runs the floor until ctx is done, and calls ready once it takes
// messages.
func Serve(ctx context.Context, cfg Config, ready func()) (err error) {
	closed := make(chan struct{})
	nc, err := nats.Connect(cfg.URL, nats.Name("natsdelay-floor"), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return fmt.Errorf("floor: connect: %w", err)
	}
	defer nc.Close()
	f := &floor{nc: nc, cfg: cfg, kick: make(chan struct{}, 1)}
	if cfg.Store {
		if f.db, err = pebble.Open(cfg.Dir, &pebble.Options{MemTableSize: 16 << 20}); err != nil {
			return fmt.Errorf("floor: open store: %w", err)
		}
		defer func() { err = errors.Join(err, f.db.Close()) }()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if cfg.Store {
		wg.Go(func() { f.write(stop) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for _, s := range []struct {
		subject, queue string
		h              nats.MsgHandler
	}{{cfg.Ingest + ".>", "natsdelay-floor", f.ingest}, {cfg.Ack + ".>", "", f.answer}, {cfg.Count, "", f.count}} {
		sub, err := nc.QueueSubscribe(s.subject, s.queue, s.h)
		if err != nil {
			return fmt.Errorf("floor: subscribe %s: %w", s.subject, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("floor: flush: %w", err)
	}
	ready()
	<-ctx.Done()
	// Drain, and wait for it, so that no handler runs once the store
	// closes.
	if err := nc.Drain(); err != nil {
		return fmt.Errorf("floor: drain: %w", err)
	}
	<-closed
	return nil
}

// floor is one running floor service.
type floor struct {
	nc    *nats.Conn
	cfg   Config
	db    *pebble.DB // nil without Store
	seq   atomic.Uint64
	acked atomic.Int64

	kick chan struct{} // buffered, 1: the writer has work
	mu   struct {
		sync.Mutex
		taken   []taken
		answers [][keyLen]byte
	}
}

// taken is a message written in the next batch, delivered after it.
type taken struct {
	key     [keyLen]byte
	subject string
	m       *nats.Msg
	firesAt time.Time
	enqAt   time.Time
}

// ingest takes one publish.
func (f *floor) ingest(m *nats.Msg) {
	subject := m.Subject[len(f.cfg.Ingest)+1:]
	at, err := time.Parse(time.RFC3339Nano, m.Header.Get(wire.HeaderAt))
	if err != nil {
		_ = m.Respond([]byte(err.Error()))
		return
	}
	t := taken{subject: subject, m: m, firesAt: at, enqAt: time.Now()}
	binary.BigEndian.PutUint64(t.key[0:], xxhash.Sum64String(subject))
	binary.BigEndian.PutUint64(t.key[8:], uint64(at.UnixMilli()))
	binary.BigEndian.PutUint64(t.key[16:], f.seq.Add(1))
	if f.db == nil {
		f.deliver(&t)
		return
	}
	f.mu.Lock()
	f.mu.taken = append(f.mu.taken, t)
	f.mu.Unlock()
	f.wake()
}

// answer takes a consumer's ACK: any payload is one here.
func (f *floor) answer(m *nats.Msg) {
	var key [keyLen]byte
	tag := m.Subject[len(f.cfg.Ack)+1:]
	if len(tag) != 2*keyLen {
		return
	}
	if _, err := hex.Decode(key[:], []byte(tag)); err != nil {
		return
	}
	if f.db == nil {
		f.acked.Add(1)
		return
	}
	f.mu.Lock()
	f.mu.answers = append(f.mu.answers, key)
	f.mu.Unlock()
	f.wake()
}

// count answers with how many ACKs the floor has applied.
func (f *floor) count(m *nats.Msg) { _ = m.Respond(strconv.AppendInt(nil, f.acked.Load(), 10)) }

func (f *floor) wake() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// write commits what was taken and answered, a batch of each at a time,
// until stop.
func (f *floor) write(stop <-chan struct{}) {
	var val []byte
	for {
		select {
		case <-stop:
			return
		case <-f.kick:
		}
		f.mu.Lock()
		took, answers := f.mu.taken, f.mu.answers
		f.mu.taken, f.mu.answers = nil, nil
		f.mu.Unlock()
		if len(took) > 0 {
			b := f.db.NewBatch()
			for i := range took {
				val = encode(val[:0], &took[i])
				_ = b.Set(took[i].key[:], val, nil)
				_ = b.Set(dueKey(took[i].key), nil, nil)
			}
			err := b.Commit(pebble.Sync)
			_ = b.Close()
			for i := range took {
				if err != nil {
					_ = took[i].m.Respond([]byte(err.Error()))
					continue
				}
				f.deliver(&took[i])
			}
		}
		if len(answers) > 0 {
			b := f.db.NewBatch()
			for _, k := range answers {
				_ = b.SingleDelete(k[:], nil)
				_ = b.SingleDelete(dueKey(k), nil)
			}
			if b.Commit(pebble.NoSync) == nil {
				f.acked.Add(int64(len(answers)))
			}
			_ = b.Close()
		}
	}
}

// deliver answers t's publisher with its tag and publishes it.
func (f *floor) deliver(t *taken) {
	tag := hex.EncodeToString(t.key[:])
	_ = t.m.Respond([]byte(tag))
	h := make(nats.Header, len(t.m.Header)+4)
	for k, v := range t.m.Header {
		if k != wire.HeaderAt {
			h[k] = v
		}
	}
	h[wire.HeaderTag] = []string{tag}
	h[wire.HeaderAttempt] = []string{"1"}
	h[wire.HeaderFireAt] = []string{t.firesAt.UTC().Format(wire.TimeLayout)}
	h[wire.HeaderEnqueuedAt] = []string{t.enqAt.UTC().Format(wire.TimeLayout)}
	_ = f.nc.PublishMsg(&nats.Msg{Subject: t.subject, Reply: f.cfg.Ack + "." + tag, Header: h, Data: t.m.Data})
}

// encode appends what the store keeps of t: its subject, headers and
// payload, each length-prefixed.
func encode(b []byte, t *taken) []byte {
	b = binary.AppendUvarint(b, uint64(len(t.subject)))
	b = append(b, t.subject...)
	for k, vs := range t.m.Header {
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(t.m.Data)))
	return append(b, t.m.Data...)
}

func dueKey(k [keyLen]byte) []byte {
	return append([]byte(duePrefix), k[:]...)
}
