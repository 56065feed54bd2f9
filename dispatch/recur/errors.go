package recur

import "errors"

// ErrInvalid is wrapped by every error of ParseCron, ParseEvery and Of: a
// spec, zone or interval that is not accepted.
var ErrInvalid = errors.New("recur: invalid schedule")

// ErrNeverFires is wrapped, with ErrInvalid, by ParseCron for a spec that
// is well formed but matches no date, such as 0 0 30 2 * (30 February).
var ErrNeverFires = errors.New("recur: the schedule never fires")
