package wire

// API verbs of flow control (docs/protocol.md, "Flow control").
const (
	VerbLimitsSet    = "LIMITS.SET"
	VerbLimitsGet    = "LIMITS.GET"
	VerbLimitsList   = "LIMITS.LIST"
	VerbLimitsDelete = "LIMITS.DELETE"
	VerbPause        = "PAUSE"
	VerbResume       = "RESUME"
)

// Limit is the flow control of a subject pattern: the body of LIMITS.SET,
// and of the replies of LIMITS.SET, LIMITS.GET, PAUSE and RESUME. Each
// subject the pattern matches has it on its own; the most specific
// pattern that matches a subject wins whole. A grouped limit (Whole or
// KeyHeader) bounds a group of messages over the matching subjects
// instead, and applies beside the subject's own limit: the most specific
// grouped one that matches. A zero field sets nothing.
type Limit struct {
	Pattern string `json:"pattern"`
	// MaxInFlight bounds each matching subject's deliveries not yet
	// settled; 0 leaves the default share.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Rate bounds each matching subject's deliveries per second, with
	// Burst at once (default a tenth of a second's worth, at least 1).
	Rate  float64 `json:"rate,omitempty"`
	Burst int     `json:"burst,omitempty"`
	// Paused holds back every delivery of the matching subjects.
	Paused bool `json:"paused,omitempty"`
	// Whole makes MaxInFlight and Rate bound the matching subjects
	// together instead of each of them.
	Whole bool `json:"whole,omitempty"`
	// KeyHeader makes MaxInFlight and Rate bound each value of that
	// header (a tenant) over all the matching subjects instead of each
	// subject; messages without the header are not bound by them.
	KeyHeader string `json:"key_header,omitempty"`
}

// PatternRequest names a pattern: the body of LIMITS.GET, LIMITS.DELETE,
// PAUSE and RESUME.
type PatternRequest struct {
	Pattern string `json:"pattern"`
}

// LimitsReply is the body of LIMITS.LIST: every limit, most specific
// pattern first.
type LimitsReply struct {
	Limits []Limit `json:"limits"`
}

// DeletedReply is the body of the reply to a LIMITS.DELETE that deleted.
type DeletedReply struct {
	Deleted bool `json:"deleted"`
}
