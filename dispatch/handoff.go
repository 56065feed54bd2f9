package dispatch

import (
	"bytes"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Hand-off: a message due when its batch commits goes from the group
// commit to the next pass whole, with no read of the due index or of the
// message, when nothing of its subject can be ahead of it unread. The
// group commit (bridge/internal/core, writer.commit) tells it so, each
// batch in key order.
//
// The argument (docs/architecture.md, "A message due at ingest"): every
// message of its subject older than it (a smaller key: same subject, so
// also an earlier due-index entry) is then in flight, settled, or known to
// the dispatcher in a way that keeps the subject out of the hand-off:
//
//   - The frontier is clear by now (dueFrontier.clearBy): no read of the
//     due index is under way or failed, and the next entry it knows of is
//     not due. Each entry it has not read was either told to the frontier
//     (Notify lowers its next time to the entry's, so it would not be
//     clear), or told to its topic (which is then in the due heap, held,
//     released, or rewound), or its commit has not been told yet: by
//     another writer than the group commit, which counts itself in with
//     Committing until it has told the dispatcher (see commits.go), or
//     by the group commit, in the batch being told, whose smaller keys
//     were told first.
//   - The topic is idle: not in the due heap, not being scanned, not held
//     at its limit, released, backing off, probing or rewound; and the
//     message is at or above its cursor, and no topic was dropped since
//     its commit began (Epoch): no scan has taken it since its commit. Each entry
//     the frontier read was handed to its topic, whose scan took it or
//     left the topic in one of those states; so every older message at or
//     above the topic's cursor has been taken, and everything below the
//     cursor is in flight or settled.
//   - Its due-index entry stays for the frontier to read, as a scan's
//     message's does: the frontier then finds it in flight or settled.
//     Moving the frontier past it (and the range passes scan past its
//     bucket) skipped entries that were neither read nor told to their
//     topic, and left messages undelivered and out of order under load
//     (TestDispatcher_NotifyMessage_Stress_EveryMessageSettledInOrder).
//
// A message handed off becomes a flight at once, as if a scan had taken
// it, and its topic's cursor moves past it: a message of the subject that
// arrives later is behind it, as after a scan. The flight goes out at the
// start of the next pass, after that pass's redeliveries and before its
// scans; a topic with a message handed off since its pass began is not
// scanned until the next, so nothing of the subject overtakes it.

// NotifyMessage is Notify for msg, just committed under s.Key by
// Repository.ScheduleOnce (written once, due at fireAtNs), which the
// caller does not change from then on. A message due now whose subject has nothing
// unread ahead of it is handed to the next pass with no read of the store;
// any other is as Notify. It reports whether msg was handed off.
func (d *Dispatcher) NotifyMessage(s delaystore.Scheduled, fireAtNs int64, msg *delaystore.StoredMessage, epoch Epoch) bool {
	handed, x, withdrawing := d.NotifyMessageWithdrawing(s, fireAtNs, msg, epoch)
	if withdrawing {
		d.DeleteWithdrawn(x, nil)
	}
	return handed
}

// NotifyMessageWithdrawing is NotifyMessage for a caller that answers
// msg's publisher only once nothing of a schedule msg replaced is left
// pending: when msg replaced (by its Delay-Id) an occurrence whose
// predecessor was planned ahead and not yet published, that predecessor
// is withdrawn, marked settled (see replacedLocked) and returned, and the
// caller must delete it with DeleteWithdrawn. A replaced occurrence that
// the planner may have just stored as a successor, and not yet noted,
// waits for it to note (see withdrawnWhileNotingLocked).
func (d *Dispatcher) NotifyMessageWithdrawing(s delaystore.Scheduled, fireAtNs int64, msg *delaystore.StoredMessage, epoch Epoch) (handed bool, withdrawn keys.Key, withdrawing bool) {
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	if fireAtNs == msg.FireAtNs && epoch == d.Epoch() && d.handOffLocked(s, msg, now) {
		return true, keys.Key{}, false
	}
	if s.HasReplaced {
		if withdrawn, withdrawing = d.replacedLocked(s.Replaced); !withdrawing && s.ReplacedOccurrence {
			withdrawn, withdrawing = d.withdrawnWhileNotingLocked(s.Replaced)
		}
	}
	d.arrivedLocked(s.Key, fireAtNs)
	return false, withdrawn, withdrawing
}

// Epoch is what NotifyMessage must know of the dispatcher from before the
// commit of the message it is told of: read it before the commit.
type Epoch uint64

// Epoch returns the dispatcher's epoch now: the number of topics it has
// dropped. NB: between a commit and NotifyMessage a pass may scan the
// message, deliver it, settle it and drop its topic; a topic kept shows
// that by its cursor, above the message, and a dropped one by the epoch.
func (d *Dispatcher) Epoch() Epoch { return Epoch(d.mu.subjects.dropped.Load()) }

// handOffLocked hands msg, committed under s.Key, to the next pass if it
// may go out now ahead of anything of its subject not yet read (see the
// argument above), and reports whether it did. mu must be held.
func (d *Dispatcher) handOffLocked(s delaystore.Scheduled, msg *delaystore.StoredMessage, now int64) bool {
	k := s.Key
	switch {
	case !d.mu.started || d.mu.closed || d.del == nil:
		return false
	case d.bucketMs != 0:
		// NB: within a coarse bucket keys are in publish order, not fire
		// order: only a scan sorts them.
		return false
	case s.HasReplaced, msg.ClientId != "", msg.Recurrence != nil,
		msg.DebounceFirstNs != 0, msg.DebounceMaxNs != 0, msg.ThrottleNs != 0:
		// Replacing, replaceable, planned or folded: the paths that read
		// them back keep what they need.
		return false
	case d.scannableAt(k, msg.FireAtNs) > now, expired(msg, now):
		return false
	case d.mu.flights.busy(k):
		// NB: a scan that began after the commit read it already, and
		// took it (or passed it as settled): it is not to be taken twice.
		return false
	case !d.mu.frontier.clearBy(now):
		return false
	case d.mu.commits.others != 0:
		return false
	case len(d.mu.handed) >= d.cfg.PassLimit, len(d.mu.flights.byKey) >= d.cfg.MaxInFlight:
		return false
	case d.cfg.Frozen != nil && d.cfg.Frozen(k.TopicHash()):
		return false
	case !d.fenceHeld():
		return false
	}
	t := d.mu.subjects.byHash[k.TopicHash()]
	if t != nil && (!t.idle(now) || t.cursor != nil && bytes.Compare(k[:], t.cursor) < 0) {
		// NB: below its cursor it may be a message a scan took since its
		// commit, settled already; or an older one arriving late, which
		// the scan its rewind brings delivers as well.
		return false
	}
	if t == nil {
		t = d.mu.subjects.topic(k.TopicHash())
	}
	if t.subject == "" {
		t.subject = msg.Subject
	}
	// NB: roomOf resolves the topic's rule, and with it its rate bucket.
	if d.mu.subjects.roomOf(t) <= 0 || t.bucket != nil || d.mu.subjects.ruleOf(t).group != nil {
		// At its limit, paused, with a rate (whose tokens only a scan
		// spends) or under a grouped limit (whose room only a scan
		// admits to): its scan decides.
		if t.flights == 0 {
			d.mu.subjects.idleNow(t)
		}
		return false
	}
	// NB: taken straight into the hand-offs, where a slice of its own
	// was an allocation for every message handed off.
	if d.takeLocked(t, []found{{k: k, msg: msg}}, &d.mu.handed) == 0 {
		if t.flights == 0 {
			d.mu.subjects.idleNow(t)
		}
		return false
	}
	if p := d.mu.handed[len(d.mu.handed)-1].f.pending; p != nil {
		p.WrittenOnce = true // as stored, so its delete may be a SingleDelete
	}
	t.cursor = k.Successor()
	// NB: its cursor is now past k's bucket, which passes may not have
	// scanned yet: a message committed later below the cursor (published
	// after it with a shorter delay) must go to its topic, to rewind the
	// cursor, not to the frontier alone, whose read passes an entry below
	// its topic's cursor as taken (see arrivedLocked).
	d.mu.frontier.scannedUpTo = max(d.mu.frontier.scannedUpTo, k.Bucket()+1)
	t.handedOut++
	d.stats.handedOff.Add(1)
	d.signal()
	return true
}

// idle reports whether t has nothing under way that a message handed off
// could overtake: not in the due heap nor being scanned, not held at its
// limit or released, not backing off or probing, nothing arrived or
// bounced below its cursor since its last scan, and no entry read for a
// point read.
func (t *topic) idle(now int64) bool {
	return t.idx < 0 && !t.scanning && !t.limited && !t.released && !t.probing && !t.probeOpen &&
		t.blockedUntil <= now && t.rewind == nil && t.single == nil
}

// heldBackLocked reports whether t's deliveries are held back now: its
// subject paused, or its partition frozen. mu must be held.
func (d *Dispatcher) heldBackLocked(t *topic) bool {
	return d.mu.subjects.ruleOf(t).paused || d.cfg.Frozen != nil && d.cfg.Frozen(t.hash)
}

// takeHandedLocked takes the messages handed off since the last pass, to
// go out in this one, in the order they were handed off. One whose
// subject was paused or frozen since goes back to its subject's scans.
// mu must be held.
func (d *Dispatcher) takeHandedLocked(now int64) []outgoing {
	if len(d.mu.handed) == 0 {
		return nil
	}
	out := make([]outgoing, 0, len(d.mu.handed))
	for _, o := range d.mu.handed {
		f := o.f
		f.topic.handedOut--
		if d.mu.flights.byKey[f.key] != f {
			continue // replaced: nothing to send
		}
		if f.state != stateSettling && d.heldBackLocked(f.topic) {
			// NB: as a fenced delivery is taken back: its topic's scan,
			// which a pause holds, delivers it in order.
			d.unsendLocked(f)
			d.mu.subjects.reschedule(f.topic, now)
			continue
		}
		out = append(out, o)
	}
	clear(d.mu.handed)
	d.mu.handed = emptied(d.mu.handed)
	return out
}
