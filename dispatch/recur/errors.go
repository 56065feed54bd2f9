package recur

import "errors"

// ErrInvalid is wrapped by every error of ParseCron, ParseEvery and Of: a
// spec, zone or interval that is not accepted.
var ErrInvalid = errors.New("recur: invalid schedule")
