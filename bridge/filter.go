package bridge

import (
	"math"
	"strings"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// Filter states (wire.Filter.State).
const (
	statePending  = "pending"
	stateInFlight = "in_flight"
	stateDead     = "dead"
)

// filter is a wire.Filter checked and parsed: see compileFilter.
type filter struct {
	subject string
	// literal is set when subject has no wildcard: its messages are one
	// key range.
	literal     bool
	fromNs      int64 // inclusive
	toNs        int64 // exclusive; math.MaxInt64 when open
	state       string
	minAttempts uint32
	recurring   *bool
	idPrefix    string
	headers     map[string]string
	// tag, when set, is the one key selected.
	tag *keys.Key
}

// compileFilter checks f and parses it, or returns a 400 that names the
// field.
func compileFilter(f wire.Filter) (*filter, error) {
	c := &filter{subject: f.Subject, toNs: math.MaxInt64, state: f.State, minAttempts: f.MinAttempts,
		recurring: f.Recurring, idPrefix: f.IDPrefix, headers: f.Headers}
	if c.subject == "" {
		c.subject = ">"
	}
	if err := checkFilter(c.subject); err != nil {
		return nil, badRequest(`"subject"%s`, strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": \"filter\""))
	}
	c.literal = !strings.ContainsAny(c.subject, "*>")
	if c.literal {
		if err := checkTarget(c.subject, nil); err != nil {
			return nil, err
		}
	}
	if f.From != "" {
		t, err := parseTime(`"from"`, f.From)
		if err != nil {
			return nil, err
		}
		c.fromNs = t.UnixNano()
	}
	if f.To != "" {
		t, err := parseTime(`"to"`, f.To)
		if err != nil {
			return nil, err
		}
		c.toNs = t.UnixNano()
	}
	if c.toNs <= c.fromNs {
		return nil, badRequest(`"to" %q is not after "from" %q: the range [from, to) is empty`, f.To, f.From)
	}
	switch c.state {
	case "":
		c.state = statePending
	case statePending, stateInFlight, stateDead:
	default:
		return nil, badRequest(`"state" %q: want pending, in_flight or dead`, keys.Clip(c.state))
	}
	if f.Tag != "" {
		k, err := keys.ParseTag(f.Tag)
		if err != nil {
			return nil, badTag(`"tag"`, err)
		}
		c.tag = &k
	}
	for name := range c.headers {
		if name == "" {
			return nil, badRequest(`"headers": an empty header name`)
		}
	}
	return c, nil
}

// matchSubject reports whether subject is selected by the filter's subject.
func (f *filter) matchSubject(subject string) bool {
	if f.literal {
		return subject == f.subject
	}
	return dispatch.SubjectMatches(f.subject, subject)
}

// match reports whether the message m, delivered attempt times, is
// selected by every field but the state.
func (f *filter) match(m *delaystore.StoredMessage, attempt uint32) bool {
	if !f.matchSubject(m.Subject) || m.FireAtNs < f.fromNs || m.FireAtNs >= f.toNs || attempt < f.minAttempts {
		return false
	}
	if f.recurring != nil && (m.Recurrence != nil) != *f.recurring {
		return false
	}
	if f.idPrefix != "" {
		id := m.ClientId
		if id == "" && m.Recurrence != nil {
			id = m.Recurrence.Id
		}
		if !strings.HasPrefix(id, f.idPrefix) {
			return false
		}
	}
	for name, want := range f.headers {
		found := false
		for _, h := range m.Headers {
			if strings.EqualFold(h.Name, name) && len(h.Values) > 0 && h.Values[0] == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
