package dispatch

import (
	"fmt"
	"time"
)

// Health reports whether the dispatcher is delivering: nil, or an error
// wrapping ErrNotDelivering that says why not. It is cheap (two short
// locks, no I/O) and safe for concurrent use; a readiness probe may call it
// on every request.
//
// "Not delivering" means one of these, each for longer than the stall
// limit, which is 2 × Config.FlushTimeout + Config.NoRespondersMaxBackoff
// (15s by default), so that a slow flush or a no-responders back-off is
// never mistaken for a stall:
//
//   - the delivery loop is stuck in one pass (a publish, a store read or
//     the wait for the flusher does not return);
//   - the loop was due to run (a timer ran out, or it was woken) and has
//     not started a pass since;
//   - the flusher is stuck: one flush, with settling what it confirmed, has
//     taken that long (Publisher.Flush does not return, or the deleter's
//     queue stays full because the store cannot commit);
//   - flushing fails: no flush has succeeded for that long and one failed
//     within it, so no delivery can be confirmed (the NATS connection is
//     down, or the flush markers do not come back).
//
// It is not a stall when nothing is due, when every message due waits for
// a subscriber (no responders: the back-off goes on), or when the in-flight
// window is full and every flight waits for its consumer's answer, its ack
// wait or its back-off: the loop keeps redelivering those as they fall due.
// Health also returns an error before Start, and ErrClosed after Close.
func (d *Dispatcher) Health() error {
	now := d.nowNs()
	limit := d.stallLimit()
	d.mu.Lock()
	started, closed, passStart, wakeBy := d.mu.started, d.mu.closed, d.mu.passStart, d.mu.wakeBy
	d.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started || wakeBy == 0:
		return fmt.Errorf("%w: not started", ErrNotDelivering)
	case passStart != 0 && now-passStart > int64(limit):
		return fmt.Errorf("%w: one delivery pass has been running for %v", ErrNotDelivering, ago(now, passStart))
	case passStart == 0:
		due := wakeBy
		if s := d.signaledAt.Load(); s != 0 {
			due = min(due, s)
		}
		if now-due > int64(limit) {
			return fmt.Errorf("%w: the delivery loop was due to run %v ago and has not", ErrNotDelivering, ago(now, due))
		}
	}
	q := &d.flushing
	q.Lock()
	busySince, lastOK, lastErr, lastFail := q.busySince, q.lastOK, q.lastErr, q.lastFail
	q.Unlock()
	switch {
	case busySince != 0 && now-busySince > int64(limit):
		return fmt.Errorf("%w: one flush of deliveries has been running for %v", ErrNotDelivering, ago(now, busySince))
	case lastErr != nil && now-lastFail <= int64(limit) && now-lastOK > int64(limit):
		return fmt.Errorf("%w: flushing deliveries has failed for %v: %w", ErrNotDelivering, ago(now, lastOK), lastErr)
	}
	return nil
}

// stallLimit is how long Health lets a pass, a flush or a due wake-up take.
func (d *Dispatcher) stallLimit() time.Duration {
	f := d.cfg.FlushTimeout
	l := time.Duration(after(int64(f), f))
	return time.Duration(after(int64(l), d.cfg.NoRespondersMaxBackoff))
}

func ago(now, then int64) time.Duration {
	return time.Duration(now - then).Round(time.Millisecond)
}
