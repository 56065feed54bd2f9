package core

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/janitor"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("invalid config")

// Config configures a Service. A zero field means the default shown by
// DefaultConfig. Each setting is declared once, by the package it
// configures: the delivery settings are dispatch.Config's, the key layout
// delaystore.RepositoryConfig's, and expiry janitor.Config's.
type Config struct {
	// Delivery holds the delivery settings (AckWait, MaxDeliver, Backoff,
	// DeadLetterSubject, MaxInFlight, ...).
	Delivery dispatch.Config
	// Repository holds TimeBucket, the width of the time bucket in keys.
	// It must not change for an existing store.
	Repository delaystore.RepositoryConfig
	// Expiry configures the removal of expired messages: Interval is how
	// often (default 1s).
	Expiry janitor.Config

	// Limits are limits that exist from the start: at the start of each
	// generation (Open, a reopen after a fault, each time a node of a
	// cluster becomes leader), each one whose pattern has no stored limit
	// is stored. A limit stored already, set or changed through the API
	// since, is kept as it is; one deleted is stored again at the next
	// start. The caller checks them (bridge.CheckLimit).
	Limits []delaystore.Limit

	// StartSuspended, if not nil, makes Open start no generation: the
	// Service starts as if Suspend(StartSuspended) had been called, with
	// the store closed, and runs nothing on it until Resume, which opens it
	// through the reopen given by WithReopen (required then). A node of a cluster starts so: only
	// its leader runs a generation.
	StartSuspended error
	// ReopenBackoff is the wait after the first failed reopen; it doubles
	// up to ReopenMaxBackoff. Defaults 100ms and 5s.
	ReopenBackoff    time.Duration
	ReopenMaxBackoff time.Duration

	// MaxBatch bounds the messages of one group commit. Default 4096.
	MaxBatch int
	// MaxBatchBytes bounds the bytes of one group commit (payloads,
	// subjects, headers), and twice it the bytes waiting to be committed.
	// Default 64 MiB.
	MaxBatchBytes int

	// IdleRelease is how long the Service waits, once quiet after a burst
	// of writes (no commit to the store, nothing in flight, nothing due
	// within IdleRelease: see dispatch.Dispatcher.Busy), before it hands
	// memory back to the operating system:
	// the store's memory for writes (delaystore.MemoryReleaser: Pebble's
	// memtables) and the Go heap's free pages (runtime/debug.FreeOSMemory,
	// which is process-wide). It does so once per burst, and only after
	// IdleReleaseMinWrites writes since the last time. Negative turns it
	// off. Default 10s.
	IdleRelease time.Duration

	// DedupWindow is how long after a message is stored a resend of it
	// is answered with the first answer and stores nothing: the same
	// (subject, Nats-Msg-Id), or the same (subject, Delay-Id) with the
	// same content (see delaystore.ScheduleOnce). Negative turns it off.
	// Default 2m, as JetStream's duplicate window.
	DedupWindow time.Duration

	// Now is the clock; nil means time.Now. It is also the dispatcher's
	// and the janitor's.
	Now func() time.Time
	// Logger receives logs; nil discards them. It is also the logger of
	// the repository, the dispatcher and the janitor.
	Logger *slog.Logger
}

// Metrics is told about the Service's commits and storage faults (see
// WithMetrics). Its methods are called on the Service's goroutines and
// must not block.
type Metrics interface {
	// Committed is called after each group commit of batch messages
	// (resends answered from the duplicate window not counted).
	Committed(batch int, took time.Duration, err error)
	// StoreFailed is called when a write fails the store.
	StoreFailed()
	// ReopenFailed is called for each failed attempt to reopen it.
	ReopenFailed()
}

// DefaultConfig returns every default in one place, the nested ones
// included.
func DefaultConfig() Config {
	return Config{
		Delivery:         dispatch.DefaultConfig(),
		Repository:       delaystore.DefaultRepositoryConfig(),
		Expiry:           janitor.DefaultConfig(),
		MaxBatch:         4096,
		MaxBatchBytes:    64 << 20,
		ReopenBackoff:    100 * time.Millisecond,
		ReopenMaxBackoff: 5 * time.Second,
		IdleRelease:      10 * time.Second,
		DedupWindow:      2 * time.Minute,
	}
}

// IdleReleaseMinWrites is how many writes (operations of committed
// batches; a message scheduled and then ACKed is four to five) make a burst
// worth handing memory back after: a trickle of messages makes the store
// keep little, and a release costs three memtable flushes.
const IdleReleaseMinWrites = 10_000

// Validate reports every bad setting at once, the nested configs'
// included, each wrapping ErrInvalidConfig. It does not ask for Store or
// Publisher, so a program can check its settings before it opens or
// connects anything; Open does.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, err := range []error{c.Delivery.Validate(), c.Repository.Validate(), c.Expiry.Validate()} {
		if err != nil {
			errs = append(errs, invalidConfig{err})
		}
	}
	if c.MaxBatch < 0 {
		bad("MaxBatch (%d) must be > 0", c.MaxBatch)
	}
	if c.MaxBatchBytes < 0 {
		bad("MaxBatchBytes (%d) must be > 0", c.MaxBatchBytes)
	}
	if c.ReopenBackoff < 0 || c.ReopenMaxBackoff < 0 {
		bad("ReopenBackoff (%v) and ReopenMaxBackoff (%v) must be > 0", c.ReopenBackoff, c.ReopenMaxBackoff)
	}
	if c.ReopenMaxBackoff > 0 && c.ReopenBackoff > c.ReopenMaxBackoff {
		bad("ReopenBackoff (%v) must not exceed ReopenMaxBackoff (%v)", c.ReopenBackoff, c.ReopenMaxBackoff)
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields the Service reads itself; the nested
// configs fill their own.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.MaxBatch = cmp.Or(c.MaxBatch, d.MaxBatch)
	c.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, d.MaxBatchBytes)
	if c.ReopenBackoff == 0 {
		c.ReopenBackoff = d.ReopenBackoff
		if c.ReopenMaxBackoff > 0 {
			c.ReopenBackoff = min(c.ReopenBackoff, c.ReopenMaxBackoff)
		}
	}
	if c.ReopenMaxBackoff == 0 {
		c.ReopenMaxBackoff = max(d.ReopenMaxBackoff, c.ReopenBackoff)
	}
	c.IdleRelease = cmp.Or(c.IdleRelease, d.IdleRelease)
	c.DedupWindow = cmp.Or(c.DedupWindow, d.DedupWindow)
	if c.Delivery.AckWait == 0 {
		c.Delivery.AckWait = d.Delivery.AckWait // INFO reports it
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Delivery.Backoff = append([]time.Duration(nil), c.Delivery.Backoff...)
	// One clock and one logger for every component.
	c.Delivery.Now, c.Delivery.Logger = c.Now, c.Logger
	c.Repository.Logger = c.Logger
	c.Expiry.Now, c.Expiry.Logger = c.Now, c.Logger
	return c
}

// invalidConfig marks a nested config's validation error as
// ErrInvalidConfig too, without adding to its text.
type invalidConfig struct{ error }

func (e invalidConfig) Unwrap() error        { return e.error }
func (e invalidConfig) Is(target error) bool { return target == ErrInvalidConfig }
