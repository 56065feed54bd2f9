package bridge

import (
	"errors"

	"natsdelay/delaystore"
)

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

func (w *watchedStore) NewIter(opts delaystore.IterOptions) (delaystore.Iterator, error) {
	it, err := w.Store.NewIter(opts)
	return it, w.check(err)
}

func (w *watchedStore) Scan(opts delaystore.IterOptions, yield func(key, value []byte) bool) error {
	return w.check(w.Store.Scan(opts, yield))
}

func (w *watchedStore) Flush() error { return w.check(w.Store.Flush()) }

// watchedBatch reports the failure of its Commit, and of Set and Delete on
// a batch the failed store made.
type watchedBatch struct {
	delaystore.Batch
	w *watchedStore
}

func (b *watchedBatch) Set(key, value []byte) error { return b.w.check(b.Batch.Set(key, value)) }
func (b *watchedBatch) Delete(key []byte) error     { return b.w.check(b.Batch.Delete(key)) }
func (b *watchedBatch) Commit(sync delaystore.SyncMode) error {
	return b.w.check(b.Batch.Commit(sync))
}
