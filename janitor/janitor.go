// Package janitor removes expired messages (Delay-TTL), and dead letters
// past their retention.
//
// It reads the repository's expiry index, which is ordered by expiry time,
// so each run reads only what has expired instead of sweeping the store. It
// hands what it finds to a Remover (the dispatcher), which dead-letters the
// messages when so configured and deletes them through its batched deleter.
package janitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/natsdelay/natsdelay/keys"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("janitor: invalid config")

// Source finds expired messages.
type Source interface {
	// Expired returns up to limit keys of messages whose expiry is at or
	// before nowNs, oldest expiry first.
	Expired(nowNs int64, limit int) ([]keys.Key, error)
}

// DeadPurger deletes dead letters. A Source that is also a DeadPurger
// has its dead letters removed once they are older than
// Config.DeadRetention.
type DeadPurger interface {
	// PurgeDead deletes up to limit dead letters that died at or before
	// beforeNs, oldest first, and returns how many it deleted.
	PurgeDead(beforeNs int64, limit int) (int, error)
}

// Remover deletes expired messages.
type Remover interface {
	// Expire removes the expired messages under ks and returns once their
	// deletes are committed.
	Expire(ctx context.Context, ks []keys.Key) error
}

// Config holds a Janitor's settings and optional hooks (Now, Logger);
// what it cannot run without, New takes. A zero field means the default.
type Config struct {
	// Interval is the time between runs. Default 1s.
	Interval time.Duration
	// BatchSize bounds the keys handed to the Remover at once. Default 1024.
	BatchSize int
	// Timeout bounds one Remover call. Default 30s.
	Timeout time.Duration
	// DeadRetention is how long dead letters are kept, from their death,
	// when the Source is a DeadPurger. Default 168h (7 days); negative
	// keeps them until they are replayed or deleted.
	DeadRetention time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{Interval: time.Second, BatchSize: 1024, Timeout: 30 * time.Second, DeadRetention: 7 * 24 * time.Hour}
}

// Validate reports every bad setting at once.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("%w: Interval (%v) must be > 0", ErrInvalidConfig, c.Interval))
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("%w: BatchSize (%d) must be > 0", ErrInvalidConfig, c.BatchSize))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%w: Timeout (%v) must be > 0", ErrInvalidConfig, c.Timeout))
	}
	return errors.Join(errs...)
}

// Janitor runs expiry on an interval. Start it with Start, stop it with
// Close; RunOnce may be called at any time.
type Janitor struct {
	cfg       Config
	source    Source
	remover   Remover
	log       *slog.Logger
	ctx       context.Context // canceled by Close, so a run under way stops
	cancel    context.CancelFunc
	done      chan struct{}
	wg        sync.WaitGroup
	startOnce sync.Once
	closeOnce sync.Once
}

// New returns a Janitor, not running yet, that finds expired messages in
// source and hands them to remover, with the settings cfg, which it
// validates.
func New(source Source, remover Remover, cfg Config) (*Janitor, error) {
	err := cfg.Validate()
	if source == nil {
		err = errors.Join(err, fmt.Errorf("%w: no Source", ErrInvalidConfig))
	}
	if remover == nil {
		err = errors.Join(err, fmt.Errorf("%w: no Remover", ErrInvalidConfig))
	}
	if err != nil {
		return nil, err
	}
	d := DefaultConfig()
	cfg.Interval = cmp.Or(cfg.Interval, d.Interval)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, d.BatchSize)
	cfg.Timeout = cmp.Or(cfg.Timeout, d.Timeout)
	cfg.DeadRetention = cmp.Or(cfg.DeadRetention, d.DeadRetention)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Janitor{cfg: cfg, source: source, remover: remover, log: cfg.Logger.With("component", "janitor"), ctx: ctx, cancel: cancel, done: make(chan struct{})}, nil
}

// Start runs the janitor every Interval until Close.
func (j *Janitor) Start() {
	j.startOnce.Do(func() {
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			j.loop()
		}()
	})
}

// Close stops the janitor and waits for a run under way. Safe to call twice.
func (j *Janitor) Close() error {
	j.closeOnce.Do(func() {
		j.cancel()
		close(j.done)
		j.wg.Wait()
	})
	return nil
}

func (j *Janitor) loop() {
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	ctx := j.ctx
	for {
		select {
		case <-j.done:
			return
		case <-t.C:
		}
		if n, err := j.RunOnce(ctx); err != nil && ctx.Err() == nil {
			j.log.Warn("expiring messages", "err", err, "expired", n)
		} else if n > 0 {
			j.log.Debug("expired messages", "expired", n)
		}
		if n, err := j.PurgeDeadOnce(ctx); err != nil && ctx.Err() == nil {
			j.log.Warn("removing dead letters past their retention", "err", err, "removed", n)
		} else if n > 0 {
			j.log.Debug("removed dead letters past their retention", "removed", n)
		}
	}
}

// RunOnce removes everything that has expired now, in batches, and returns
// how many keys it handed to the Remover.
func (j *Janitor) RunOnce(ctx context.Context) (int, error) {
	now := j.cfg.Now().UnixNano()
	total := 0
	var prevFirst keys.Key
	for round := 0; ; round++ {
		ks, err := j.source.Expired(now, j.cfg.BatchSize)
		if err != nil {
			return total, fmt.Errorf("janitor: find expired: %w", err)
		}
		if len(ks) == 0 || (round > 0 && ks[0] == prevFirst) {
			// Nothing left, or the remover kept what it was given (it could
			// not dead-letter it): try again next run rather than spin.
			return total, nil
		}
		prevFirst = ks[0]
		rctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
		err = j.remover.Expire(rctx, ks)
		cancel()
		total += len(ks)
		if err != nil {
			return total, fmt.Errorf("janitor: expire %d messages: %w", len(ks), err)
		}
		if len(ks) < j.cfg.BatchSize {
			return total, nil
		}
	}
}

// PurgeDeadOnce removes every dead letter older than DeadRetention now,
// in batches, and returns how many it removed. It does nothing when the
// Source keeps no dead letters or the retention is negative.
func (j *Janitor) PurgeDeadOnce(ctx context.Context) (int, error) {
	p, ok := j.source.(DeadPurger)
	if !ok || j.cfg.DeadRetention < 0 {
		return 0, nil
	}
	before := j.cfg.Now().Add(-j.cfg.DeadRetention).UnixNano()
	total := 0
	for ctx.Err() == nil {
		n, err := p.PurgeDead(before, j.cfg.BatchSize)
		total += n
		if err != nil {
			return total, fmt.Errorf("janitor: remove dead letters: %w", err)
		}
		if n < j.cfg.BatchSize {
			return total, nil
		}
	}
	return total, ctx.Err()
}
