package core

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/bridge/idle"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/janitor"
)

// generation is one open store and everything that runs on it: the
// repository, the dispatcher, the janitor and the group-commit writer. A
// write to disk that fails ends a generation; recovery replaces it whole
// with one on a reopened store, because what the old one keeps in memory
// (pending counts, the last event id, flights, cursors) may no longer match
// what is on disk. Suspend ends one the same way, for another reason.
type generation struct {
	store delaystore.Store // watched: see watchedStore
	repo  *delaystore.Repository
	disp  *dispatch.Dispatcher
	jan   *janitor.Janitor
	w     *writer
	// idle hands memory back once the generation goes quiet after a
	// burst of writes; nil when Config.IdleRelease turns that off.
	idle *idle.Watcher

	// failed is set by the first call that met delaystore.ErrFailed.
	failed atomic.Bool
	// retired is set once the generation stopped working: failed and
	// retired by recovery, or suspended.
	retired atomic.Bool
	// serving is set once the generation is the Service's current one.
	// Its dispatcher delivers nothing before: the ACK of a delivery made
	// by a generation still being swapped in would meet the Service's
	// 503, and the message would come again after the ACK wait.
	serving atomic.Bool

	stopWorkOnce   sync.Once
	closeStoreOnce sync.Once
}

// startGeneration opens the repository over st and starts a dispatcher, a
// janitor and a writer on it. A reopened store is first checked to take a
// synced write, as it must before it takes messages again, and its
// generation delivers only once swap makes it current; Open's serves at
// once. On error it closes what it started and st.
func (s *Service) startGeneration(st delaystore.Store, reopened bool) (*generation, error) {
	g := &generation{}
	g.store = &watchedStore{Store: st, onFail: func(err error) { s.fail(g, err) }}
	g.serving.Store(!reopened)
	if err := s.buildGeneration(g, reopened); err != nil {
		return nil, errors.Join(err, g.stopWork(), g.closeStore())
	}
	return g, nil
}

func (s *Service) buildGeneration(g *generation, probe bool) error {
	var err error
	g.repo, err = delaystore.OpenRepository(g.store, s.cfg.Repository)
	if err != nil {
		return fmt.Errorf("core: open repository: %w", err)
	}
	if probe {
		// NB: a store often opens fine on a disk that still fails (it only
		// reads); without this the service would flap between ready and
		// failing at each ingest.
		if err := g.repo.CheckWritable(); err != nil {
			return fmt.Errorf("core: reopened store: %w", err)
		}
	}
	if err := seedLimits(g.repo, s.cfg.Limits); err != nil {
		return err
	}
	delivery := s.cfg.Delivery
	fence := delivery.Fence
	delivery.Fence = func() bool { return g.serving.Load() && (fence == nil || fence()) }
	if g.disp, err = dispatch.New(g.repo, s.pub, delivery); err != nil {
		return err
	}
	if g.jan, err = janitor.New(g.repo, g.disp, s.cfg.Expiry); err != nil {
		return err
	}
	if err := g.disp.Start(); err != nil {
		return err
	}
	g.jan.Start()
	g.w = newWriter(g.repo, g.disp, s.cfg.MaxBatch, s.cfg.MaxBatchBytes, s.log, s.committed)
	g.w.window, g.w.now = s.cfg.DedupWindow, s.cfg.Now
	if s.cfg.IdleRelease > 0 {
		g.idle = idle.Start(idle.Config{
			Quiet:       s.cfg.IdleRelease,
			MinActivity: IdleReleaseMinWrites,
			// NB: a message due within the quiet period would find the
			// memtable just rotated and the heap just collected: wait.
			InUse:   func() bool { return g.disp.Busy(s.cfg.IdleRelease) },
			Release: func() { s.releaseMemory(g) },
		})
		g.store.(*watchedStore).idle.Store(g.idle)
	}
	return nil
}

// releaseMemory hands back what the burst that just ended made the
// process keep: the store's memory for writes, the messages the
// repository kept from its writes, then the Go heap's free pages. It runs
// on g's idle watcher, which stopWork stops first, so never on a closed
// store.
func (s *Service) releaseMemory(g *generation) {
	start := time.Now()
	if err := g.store.(*watchedStore).ReleaseMemory(); err != nil {
		s.log.Warn("handing the store's memory back", "err", err)
	}
	g.repo.ReleaseMemory()
	// Once per burst, not periodically: it collects and scavenges
	// the whole heap, a few milliseconds on an idle service.
	debug.FreeOSMemory()
	s.memReleases.Add(1)
	s.log.Debug("idle after a burst of writes: memory handed back", "took", time.Since(start).Round(time.Microsecond))
}

// idleGeneration is the generation of a Service opened suspended: st,
// closed at once, with nothing running on it. The first Resume replaces it.
func (s *Service) idleGeneration(st delaystore.Store) *generation {
	g := &generation{store: st}
	g.retired.Store(true)
	if err := g.closeStore(); err != nil {
		s.log.Warn("closing the store", "err", err)
	}
	return g
}

// stopWork stops the idle watcher, the writer, the janitor and the
// dispatcher, in that order, and returns the errors of the janitor's and
// the dispatcher's Close, joined. Nothing may hand the writer messages
// any more: see Service.retire and Service.Stop. Safe to call twice; the
// second call returns nil.
func (g *generation) stopWork() error {
	var errs []error
	g.stopWorkOnce.Do(func() {
		if g.idle != nil {
			// First, and waited for: a release under way uses the
			// store.
			g.idle.Close()
		}
		if g.w != nil {
			g.w.close()
		}
		if g.jan != nil {
			errs = append(errs, g.jan.Close())
		}
		if g.disp != nil {
			errs = append(errs, g.disp.Close())
		}
	})
	return errors.Join(errs...)
}

// closeStore closes the repository and the store, after stopWork. A
// failed store is not flushed: it would only report its fault again.
// The second call returns nil.
func (g *generation) closeStore() error {
	var errs []error
	g.closeStoreOnce.Do(func() {
		if g.repo != nil {
			errs = append(errs, g.repo.Close())
		}
		if !g.failed.Load() {
			errs = append(errs, g.store.Flush())
		}
		errs = append(errs, g.store.Close())
	})
	return errors.Join(errs...)
}

// watchedStore is the Service's view of one store: it passes every call
// on, and reports the first error that says the store failed
// (delaystore.ErrFailed) to onFail, whichever component met it: the
// writer's commit, the deleter's, a scan of the dispatcher or the janitor,
// or the API. The Service then recovers (see Service.fail).
type watchedStore struct {
	delaystore.Store
	// onFail is called on the caller's goroutine, possibly inside a commit:
	// it must not block.
	onFail func(error)
	// idle, once set, is told the writes of every commit.
	idle atomic.Pointer[idle.Watcher]
}

var _ delaystore.Store = (*watchedStore)(nil)

func (w *watchedStore) check(err error) error {
	if err != nil && errors.Is(err, delaystore.ErrFailed) {
		w.onFail(err)
	}
	return err
}

func (w *watchedStore) Get(key []byte) ([]byte, error) {
	v, err := w.Store.Get(key)
	return v, w.check(err)
}

func (w *watchedStore) NewBatch() delaystore.Batch {
	return &watchedBatch{Batch: w.Store.NewBatch(), w: w}
}

// NewBatchSize starts a batch with room for size bytes if the store
// can (see delaystore.BatchSizer), else an ordinary one.
func (w *watchedStore) NewBatchSize(size int) delaystore.Batch {
	if bs, ok := w.Store.(delaystore.BatchSizer); ok {
		return &watchedBatch{Batch: bs.NewBatchSize(size), w: w}
	}
	return w.NewBatch()
}

func (w *watchedStore) NewIter(opts delaystore.IterOptions) (delaystore.Iterator, error) {
	it, err := w.Store.NewIter(opts)
	return it, w.check(err)
}

func (w *watchedStore) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	return w.check(w.Store.Scan(opts, yield))
}

func (w *watchedStore) Flush() error { return w.check(w.Store.Flush()) }

// ReleaseMemory hands back the store's memory for writes, if it keeps
// any (see delaystore.MemoryReleaser).
func (w *watchedStore) ReleaseMemory() error {
	if r, ok := w.Store.(delaystore.MemoryReleaser); ok {
		return w.check(r.ReleaseMemory())
	}
	return nil
}

// watchedBatch reports the failure of its Commit, and of Set, Delete and
// SingleDelete on a batch the failed store made.
type watchedBatch struct {
	delaystore.Batch
	w *watchedStore
}

func (b *watchedBatch) Set(key, value []byte) error { return b.w.check(b.Batch.Set(key, value)) }
func (b *watchedBatch) Delete(key []byte) error     { return b.w.check(b.Batch.Delete(key)) }
func (b *watchedBatch) SingleDelete(key []byte) error {
	return b.w.check(b.Batch.SingleDelete(key))
}
func (b *watchedBatch) Commit(sync delaystore.SyncMode) error {
	n := b.Batch.Len()
	err := b.w.check(b.Batch.Commit(sync))
	if w := b.w.idle.Load(); w != nil && err == nil {
		w.Touch(n)
	}
	return err
}
