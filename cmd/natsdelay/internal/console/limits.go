package console

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// limitsSource is what the limits page reads and changes: LIMITS.LIST,
// LIMITS.SET, LIMITS.DELETE, PAUSE and RESUME.
type limitsSource interface {
	Limits() (wire.LimitsReply, error)
	SetLimit(wire.Limit) (wire.Limit, error)
	DeleteLimit(pattern string) error
	Pause(pattern string) (wire.Limit, error)
	Resume(pattern string) (wire.Limit, error)
}

func (c *Console) routeLimits() {
	c.mux.HandleFunc("GET "+Prefix+"limits", c.limits)
	c.mux.HandleFunc("POST "+Prefix+"limits/set", c.limitSet)
	c.mux.HandleFunc("POST "+Prefix+"limits/delete", c.limitAction("limit-removed", func(s limitsSource, p string) error { return s.DeleteLimit(p) }))
	c.mux.HandleFunc("POST "+Prefix+"limits/pause", c.limitAction("paused", func(s limitsSource, p string) error { _, err := s.Pause(p); return err }))
	c.mux.HandleFunc("POST "+Prefix+"limits/resume", c.limitAction("resumed", func(s limitsSource, p string) error { _, err := s.Resume(p); return err }))
}

// limitForm is the set form as it was filled in, kept when it is refused.
type limitForm struct {
	Pattern, MaxInFlight, Rate, Burst string
	// Whole and KeyHeader are what the limit bounds: the matching
	// subjects together, or each value of a header over them; neither,
	// each subject.
	Whole     bool
	KeyHeader string
}

type limitsData struct {
	Limits []wire.Limit
	Form   limitForm
}

func (c *Console) limits(w http.ResponseWriter, r *http.Request) {
	c.renderLimits(w, r, http.StatusOK, limitForm{}, nil)
}

// renderLimits renders the limits page with the set form as f, and the
// refusal failure of an action if there was one.
func (c *Console) renderLimits(w http.ResponseWriter, r *http.Request, status int, f limitForm, failure error) {
	d := limitsData{Form: f}
	s := c.service()
	if s == nil {
		c.render(w, r, status, "limits", Prefix+"limits", "Limits", d, errStarting)
		return
	}
	rep, err := s.Limits()
	if err != nil && failure == nil {
		failure = err
	}
	d.Limits = rep.Limits
	c.render(w, r, status, "limits", Prefix+"limits", "Limits", d, failure)
}

// limitSet sets a limit from the form, as LIMITS.SET: an empty number is
// 0, its default. The service checks the grouping (whole, key_header) as
// it does for the API.
func (c *Console) limitSet(w http.ResponseWriter, r *http.Request) {
	f := limitForm{Pattern: strings.TrimSpace(r.PostFormValue("pattern")), MaxInFlight: r.PostFormValue("max_in_flight"),
		Rate: r.PostFormValue("rate"), Burst: r.PostFormValue("burst"),
		Whole: r.PostFormValue("whole") != "", KeyHeader: strings.TrimSpace(r.PostFormValue("key_header"))}
	l := wire.Limit{Pattern: f.Pattern, Paused: r.PostFormValue("paused") != "", Whole: f.Whole, KeyHeader: f.KeyHeader}
	var bad []string
	num := func(name, v string, parse func(string) error) {
		if v = strings.TrimSpace(v); v == "" {
			return
		}
		if err := parse(v); err != nil {
			bad = append(bad, `"`+name+`" `+strconv.Quote(v)+": want a number")
		}
	}
	num("max_in_flight", f.MaxInFlight, func(v string) (err error) { l.MaxInFlight, err = strconv.Atoi(v); return })
	num("rate", f.Rate, func(v string) (err error) { l.Rate, err = strconv.ParseFloat(v, 64); return })
	num("burst", f.Burst, func(v string) (err error) { l.Burst, err = strconv.Atoi(v); return })
	s := c.service()
	switch {
	case len(bad) > 0:
		c.renderLimits(w, r, http.StatusBadRequest, f, badRequest("limit of %q: %s", f.Pattern, strings.Join(bad, "; ")))
	case s == nil:
		c.renderLimits(w, r, http.StatusOK, f, errStarting)
	default:
		if _, err := s.SetLimit(l); err != nil {
			c.renderLimits(w, r, http.StatusOK, f, err)
			return
		}
		c.redirect(w, r, Prefix+"limits", "limit-set", l.Pattern)
	}
}

// limitAction is the handler of a form that names a pattern and does do
// to it.
func (c *Console) limitAction(done string, do func(limitsSource, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimSpace(r.PostFormValue("pattern"))
		s := c.service()
		if s == nil {
			c.renderLimits(w, r, http.StatusOK, limitForm{}, errStarting)
			return
		}
		if err := do(s, p); err != nil {
			c.renderLimits(w, r, http.StatusOK, limitForm{Pattern: p}, err)
			return
		}
		c.redirect(w, r, Prefix+"limits", done, p)
	}
}
