package dispatch

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config holds a Dispatcher's settings, and the optional hooks it calls
// (Fence, Observer, Lifecycle, Now, Logger); what it cannot run without, New takes.
// A zero field means the default shown by DefaultConfig.
type Config struct {
	// Fence, if set, reports whether this process may publish now: on a
	// node of a cluster, whether it holds the leadership lease, which a
	// process that was paused has lost. It is checked before every
	// delivery; while it reports false the dispatcher publishes nothing
	// and looks again every FenceRetry, and a delivery it held back goes
	// out, in order, once it reports true. Nil: always.
	Fence func() bool
	// FenceRetry is how often a fenced dispatcher looks at Fence again: a
	// leader whose lease renewal was slow holds it again within a round
	// trip. A fence the process lifts itself is told with FenceLifted,
	// and looked at at once. Default 5ms.
	FenceRetry time.Duration

	// AckWait is how long a delivery waits for an answer before it counts as
	// failed and is redelivered. Default 30s.
	AckWait time.Duration
	// MaxDeliver is the default number of deliveries after which an unACKed
	// message is dead-lettered; a message's own Delay-Max-Deliver wins. 0 (the
	// default) means unlimited.
	MaxDeliver uint32
	// Backoff[i] is the wait before the next delivery after attempt i+1
	// failed (its ack wait ran out); the last value repeats. Empty (the
	// default) redelivers right after the ack wait.
	Backoff []time.Duration
	// DeadLetterSubject receives dead letters. Empty (the default) deletes
	// them without publishing.
	DeadLetterSubject string
	// DeadLetterExpired also dead-letters expired messages (reason expired).
	DeadLetterExpired bool

	// MaxInFlight bounds the messages delivered and not yet settled; memory
	// grows with it. When reached, no first delivery goes out until an
	// answer (or a bounce) settles one; redeliveries go on, since each
	// holds its slot already. Flights that wait longer than AckWait (a
	// -NAK with a long delay, a long back-off) do not keep the window
	// full while first deliveries are due: a quarter of the window is then
	// freed of them, furthest deadline first, and their subjects wait
	// until those deadlines (see Stats.Evicted). Default 65536.
	MaxInFlight int
	// SubjectMaxInFlight bounds the flights of one subject, so that no
	// subject holds more than its share of the window: one whose
	// consumers never answer fills its share and no more, and is
	// redelivered within it, while every other subject's first
	// deliveries go out. Default MaxInFlight/8 (8192 of 65536), at
	// least 1: a subject alone can still keep thousands of deliveries
	// waiting for their settlement (in a cluster, until the ACK's delete
	// is committed by a quorum), and eight must be stuck at once before
	// the window is full.
	SubjectMaxInFlight int
	// PassLimit bounds the deliveries of one pass between flushes. Default 4096.
	PassLimit int
	// TopicPassLimit bounds one topic's share of a pass, for fairness.
	// Default 1024.
	TopicPassLimit int
	// NoRespondersBackoff is the first wait after a delivery reached no
	// subscriber; it doubles up to NoRespondersMaxBackoff. Defaults 50ms and 5s.
	NoRespondersBackoff    time.Duration
	NoRespondersMaxBackoff time.Duration
	// FlushTimeout bounds Publisher.Flush. Default 5s.
	FlushTimeout time.Duration
	// MaxPendingDeletes bounds the deleter's queue; callers block when it is
	// full. Default 65536.
	MaxPendingDeletes int
	// AttemptWriteDelay is how long the attempt count of a delivery waits
	// before it is written. An ACK within it deletes the message instead,
	// with no count written at all. A crash loses the counts still
	// waiting, so a redelivery after one may repeat an attempt number;
	// Close writes them. Default 1s.
	AttemptWriteDelay time.Duration
	// PlanAhead is how far ahead occurrences of recurring schedules are
	// planned (their successor stored, with a synced commit), so that one
	// goes out when it falls due with no commit before it. An occurrence
	// canceled or replaced by its Delay-Id after it was planned ahead is
	// not published; one planned ahead is delivered even if a crash
	// keeps it from going out on time (as one planned on delivery is).
	// Occurrences with a TTL are planned as they go out, since planning
	// sets their expiry, which counts from then. Negative disables it:
	// occurrences are planned as they go out.
	// The planner reads each between PlanAhead/2 and PlanAhead before its
	// time and, while passes deliver, waits up to PlanAhead/4 for them to
	// fall quiet, so a planning commit that takes up to PlanAhead/4 (a
	// slow disk) still comes before it. Default 1s.
	PlanAhead time.Duration
	// StageAhead is how long before a burst of occurrences planned
	// ahead falls due (StageMin or more in one millisecond) the passes
	// that deliver it read it: its subjects are scanned and its flights
	// taken while the burst is still to come, and at its time the passes
	// only publish. Nothing goes out before its time; a message that
	// arrives while the staged passes wait goes out after them, up to
	// StageAhead later than it would have. Negative disables it.
	// Default 50ms.
	StageAhead time.Duration
	// StageMin is how many occurrences planned ahead must fall due in
	// the same millisecond for their passes to be staged. Default 256.
	StageMin int
	// DeleteHold is how long, at most, the deletes of ACKed messages
	// wait for a staged burst to go out: they are committed after its
	// publishes, not among them, so an ACK's delete (and a CANCEL that
	// waits for one) may take up to DeleteHold longer while a burst goes
	// out. Negative disables it. Default 100ms.
	DeleteHold time.Duration

	// Observer, if not nil, is told about every delivery.
	Observer Observer
	// Lifecycle, if not nil, is told what becomes of each message (see
	// Lifecycle). Nil costs nothing.
	Lifecycle Lifecycle
	// Frozen, if not nil, reports whether the messages of a topic, by its
	// hash, are held back as a pause holds them: neither delivered nor
	// redelivered, their flights kept, and its recurring occurrences not
	// planned ahead, so that nothing writes to the topic. A cell of a fleet freezes the
	// partitions it hands to another cell, or does not own, and holds back
	// the deliveries of those it drains first (see Unsettled). It is called
	// with the dispatcher's lock held, so it must be quick and must not
	// call the dispatcher; call ReloadLimits once its answers change.
	Frozen func(topicHash uint64) bool

	// Now is the clock; nil means time.Now. Tests may override it.
	Now func() time.Time
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		AckWait:                30 * time.Second,
		MaxInFlight:            65536,
		PassLimit:              4096,
		TopicPassLimit:         1024,
		NoRespondersBackoff:    50 * time.Millisecond,
		NoRespondersMaxBackoff: 5 * time.Second,
		FlushTimeout:           5 * time.Second,
		MaxPendingDeletes:      65536,
		AttemptWriteDelay:      time.Second,
		PlanAhead:              time.Second,
		StageAhead:             50 * time.Millisecond,
		StageMin:               256,
		DeleteHold:             100 * time.Millisecond,
		FenceRetry:             5 * time.Millisecond,
	}
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.AckWait = cmp.Or(c.AckWait, d.AckWait)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, d.MaxInFlight)
	if c.SubjectMaxInFlight == 0 {
		c.SubjectMaxInFlight = max(1, c.MaxInFlight/8)
	}
	c.PassLimit = cmp.Or(c.PassLimit, d.PassLimit)
	c.TopicPassLimit = cmp.Or(c.TopicPassLimit, d.TopicPassLimit)
	c.NoRespondersBackoff = cmp.Or(c.NoRespondersBackoff, d.NoRespondersBackoff)
	c.NoRespondersMaxBackoff = cmp.Or(c.NoRespondersMaxBackoff, d.NoRespondersMaxBackoff)
	c.FlushTimeout = cmp.Or(c.FlushTimeout, d.FlushTimeout)
	c.MaxPendingDeletes = cmp.Or(c.MaxPendingDeletes, d.MaxPendingDeletes)
	c.AttemptWriteDelay = cmp.Or(c.AttemptWriteDelay, d.AttemptWriteDelay)
	c.PlanAhead = cmp.Or(c.PlanAhead, d.PlanAhead)
	c.StageAhead = cmp.Or(c.StageAhead, d.StageAhead)
	c.StageMin = cmp.Or(c.StageMin, d.StageMin)
	c.DeleteHold = cmp.Or(c.DeleteHold, d.DeleteHold)
	c.FenceRetry = cmp.Or(c.FenceRetry, d.FenceRetry)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Backoff = append([]time.Duration(nil), c.Backoff...)
	return c
}

// Validate reports every bad setting at once. It does not ask for Repo
// and Publisher, so settings can be checked before they exist; New does.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.AckWait < 0 {
		bad("AckWait (%v) must be > 0", c.AckWait)
	}
	for i, b := range c.Backoff {
		if b < 0 {
			bad("Backoff[%d] (%v) must be >= 0", i, b)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxInFlight", c.MaxInFlight}, {"SubjectMaxInFlight", c.SubjectMaxInFlight}, {"PassLimit", c.PassLimit}, {"TopicPassLimit", c.TopicPassLimit}, {"MaxPendingDeletes", c.MaxPendingDeletes}, {"StageMin", c.StageMin}} {
		if f.v < 0 {
			bad("%s (%d) must be > 0", f.name, f.v)
		}
	}
	if c.NoRespondersBackoff < 0 || c.NoRespondersMaxBackoff < 0 {
		bad("NoRespondersBackoff (%v) and NoRespondersMaxBackoff (%v) must be > 0", c.NoRespondersBackoff, c.NoRespondersMaxBackoff)
	}
	if c.NoRespondersMaxBackoff > 0 && c.NoRespondersBackoff > c.NoRespondersMaxBackoff {
		bad("NoRespondersBackoff (%v) must not exceed NoRespondersMaxBackoff (%v)", c.NoRespondersBackoff, c.NoRespondersMaxBackoff)
	}
	if c.FlushTimeout < 0 {
		bad("FlushTimeout (%v) must be > 0", c.FlushTimeout)
	}
	if c.AttemptWriteDelay < 0 {
		bad("AttemptWriteDelay (%v) must be > 0", c.AttemptWriteDelay)
	}
	if c.FenceRetry < 0 {
		bad("FenceRetry (%v) must be > 0", c.FenceRetry)
	}
	return errors.Join(errs...)
}
