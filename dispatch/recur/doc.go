// Package recur computes recurring schedules (PROTOCOL.md section 6): it
// parses Delay-Cron specs (with robfig/cron/v3's parser) and Delay-Every
// intervals, finds planned times in a zone, and decides each occurrence's
// successor under the catch-up policies. Its functions take the time as an
// argument and read no clock, so tests run them on any date.
//
// It sits between delaystore, whose Recurrence it reads, and dispatch and
// bridge, which use it: keys <- delaystore <- recur <- dispatch, bridge;
// it imports nothing of dispatch.
//
// # Time zones and daylight saving
//
// A cron spec is matched on the wall clock of its zone (Delay-TZ, UTC by
// default), and every matching wall-clock time fires once:
//
//   - a wall time that does not exist, because the clocks jump forward over
//     it, fires at the first instant after the gap (02:30 on the night
//     Europe/Berlin goes from 02:00 to 03:00 fires at 03:00 CEST);
//   - a wall time that exists twice, because the clocks go back over it,
//     fires once, at its first instance (01:30 on the night
//     America/New_York goes from 02:00 EDT back to 01:00 EST fires at
//     01:30 EDT only).
//
// robfig/cron's own Next skips times in a gap and fires twice in a fold,
// so Spec matches the spec on wall-clock times written as UTC, which has
// neither, and maps each wall time to an instant itself. An interval
// (Delay-Every) ignores zones: occurrences are the first plus whole
// intervals.
//
// # Storage and crash safety
//
// A schedule is stored once, with its next occurrence, never as a list of
// future times. Each occurrence is an ordinary pending message (its own
// event key, so its own tag) whose Recurrence field holds the schedule's
// spec, end, policy, id, the occurrence's planned time and number, and
// whether its successor was planned. Only one occurrence of a schedule is
// ever unplanned, and at most two exist at once: one out for delivery
// (planned) and its successor (pending). The repository's schedule index
// points at the unplanned one, by (subject, Delay-Id, or the tag of the
// first occurrence when there is none), and counts the schedules, in the
// same batches; the API lists schedules from it without reading messages.
//
// The dispatcher plans the successor of an unplanned occurrence before it
// publishes that occurrence for the first time: one synced repository
// batch (delaystore.Repository.Advance) rewrites the occurrence as planned
// and stores the successor, moving the schedule's Delay-Id index entry to
// it. So:
//
//   - a crash before that commit leaves the occurrence unplanned and
//     pending; after restart it is delivered under the same tag and its
//     successor planned then: nothing is lost;
//   - a crash after it leaves both stored, and the occurrence, marked
//     planned, is never planned again: no occurrence is stored twice, so
//     none fires under two tags;
//   - a delivery is never published before its successor is stored, so an
//     ACK (which deletes it) can never end the schedule.
//
// The dispatcher makes that commit ahead of time where it can (see
// dispatch.Config.PlanAhead): occurrences due within the look-ahead are
// planned in one batch, so one that falls due goes out with no commit
// before it. The reasoning above does not depend on when the commit is
// made; a pass still plans, before publishing, any occurrence that was not
// planned ahead.
//
// Replacing or canceling by (subject, Delay-Id) deletes the newest
// occurrence, which ends the chain; an occurrence already out finishes its
// delivery. Canceling by the tag of the pending occurrence does the same,
// and canceling one out for delivery cancels its successor too (package
// bridge/internal/core).
//
// # Catch-up
//
// An occurrence is missed when it goes out after its successor's planned
// time. Policy one (the default) delivers it once for everything missed and
// plans the first time after now; all delivers each missed occurrence in
// turn, at most MaxCatchUp in a row, then goes back on the plan; none
// delivers no missed occurrence: it is deleted unsent and the first time
// after now planned. Occurrences a policy skips do not count toward
// Delay-Limit.
package recur
