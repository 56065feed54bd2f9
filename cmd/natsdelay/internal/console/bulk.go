package console

import (
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// bulkSource is what the bulk actions page runs: BULK.<verb>, one bounded
// step at a time.
type bulkSource interface {
	Bulk(verb string, r wire.BulkRequest) (wire.BulkReply, error)
}

// The page's verbs, as the form names them, and BULK's.
var bulkVerbNames = map[string]string{
	"cancel": "CANCEL", "reschedule": "RESCHEDULE", "fire": "FIRE", "replay": "REPLAY", "delete": "DELETE",
}

// bulkPast is what a finished operation says it did.
var bulkPast = map[string]string{
	"cancel": "Canceled", "reschedule": "Rescheduled", "fire": "Fired", "replay": "Replayed", "delete": "Deleted",
}

const (
	// dryStep is how many messages one step of a dry run counts: the
	// most a step takes, as a dry run changes nothing.
	dryStep = 10_000
	// defaultRunStep is how many messages one step of the real operation
	// acts on, unless the form says otherwise: BULK's default.
	defaultRunStep = 1000
	maxRunStep     = 10_000
	// sampleShown is how many messages of the selection the page lists.
	sampleShown = 10
)

func (c *Console) routeBulk() {
	c.mux.HandleFunc("GET "+Prefix+"bulk", c.bulk)
	c.mux.HandleFunc("POST "+Prefix+"bulk/run", c.bulkRun)
}

// bulkForm is the filter and the verb as the form has them.
type bulkForm struct {
	Verb                                string
	Subject, From, To, State, Recurring string
	MinAttempts, IDPrefix, Headers, Tag string
	At, Shift, ReplayTo                 string
	// Step is how many messages one step of the real operation acts on.
	Step string
}

func bulkFormOf(r *http.Request) bulkForm {
	v := func(name string) string { return strings.TrimSpace(r.FormValue(name)) }
	f := bulkForm{Verb: v("verb"), Subject: v("subject"), From: v("from"), To: v("to"), State: v("state"), Recurring: v("recurring"),
		MinAttempts: v("min_attempts"), IDPrefix: v("id_prefix"), Headers: r.FormValue("headers"), Tag: v("tag"),
		At: v("at"), Shift: v("shift"), ReplayTo: v("replay_to"), Step: v("step")}
	if f.Verb == "" {
		f.Verb = "cancel"
	}
	return f
}

// Dead reports whether the form's verb works on dead letters.
func (f bulkForm) Dead() bool { return f.Verb == "replay" || f.Verb == "delete" }

// Query is the form as a query string, for links to it.
func (f bulkForm) Query() string {
	q := url.Values{}
	for _, kv := range f.fields() {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	return q.Encode()
}

// fields are the form's names and values, in the form's order.
func (f bulkForm) fields() [][2]string {
	return [][2]string{{"verb", f.Verb}, {"subject", f.Subject}, {"from", f.From}, {"to", f.To}, {"state", f.State},
		{"recurring", f.Recurring}, {"min_attempts", f.MinAttempts}, {"id_prefix", f.IDPrefix}, {"headers", f.Headers},
		{"tag", f.Tag}, {"at", f.At}, {"shift", f.Shift}, {"replay_to", f.ReplayTo}, {"step", f.Step}}
}

// Fields are the form's non-empty fields, for the hidden inputs of the
// confirm and continue forms.
func (f bulkForm) Fields() [][2]string {
	var out [][2]string
	for _, kv := range f.fields() {
		if kv[1] != "" {
			out = append(out, kv)
		}
	}
	return out
}

// request is the BULK verb and request of the form, or the 400 of what is
// wrong with it; the rest of the checks are BULK's own.
func (f bulkForm) request() (string, wire.BulkRequest, error) {
	verb, ok := bulkVerbNames[f.Verb]
	if !ok {
		return "", wire.BulkRequest{}, badRequest("verb %q: want cancel, reschedule, fire, replay or delete", f.Verb)
	}
	r := wire.BulkRequest{Filter: wire.Filter{Subject: f.Subject, From: f.From, To: f.To, IDPrefix: f.IDPrefix, Tag: f.Tag}}
	if !f.Dead() {
		r.State = f.State
	}
	switch f.Recurring {
	case "":
	case "only", "none":
		b := f.Recurring == "only"
		r.Recurring = &b
	default:
		return "", r, badRequest("recurring %q: want only, none or nothing", f.Recurring)
	}
	if f.MinAttempts != "" {
		n, err := strconv.ParseUint(f.MinAttempts, 10, 32)
		if err != nil {
			return "", r, badRequest("min_attempts %q: want a whole number", f.MinAttempts)
		}
		r.MinAttempts = uint32(n)
	}
	for line := range strings.Lines(f.Headers) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if name = strings.TrimSpace(name); !ok || name == "" {
			return "", r, badRequest("headers %q: want one Name: value a line", line)
		}
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		r.Headers[name] = strings.TrimSpace(value)
	}
	switch verb {
	case "RESCHEDULE":
		r.At, r.Shift = f.At, f.Shift
	case "REPLAY":
		r.ReplayTo = f.ReplayTo
	}
	return verb, r, nil
}

// step is how many messages one step of the real operation acts on.
func (f bulkForm) step() (int, error) {
	if f.Step == "" {
		return defaultRunStep, nil
	}
	n, err := strconv.Atoi(f.Step)
	if err != nil || n < 1 || n > maxRunStep {
		return 0, badRequest("step %q: want 1 to %d messages", f.Step, maxRunStep)
	}
	return n, nil
}

// bulkProgress is where a dry run or an operation stands, carried from
// one request to the next by the continue form.
type bulkProgress struct {
	// Dry is set for the dry run.
	Dry bool
	// Count and Skipped add up the steps' counts; Expect is the dry
	// run's count, which the operation shows next to its own.
	Count, Skipped, Expect int
	// Cursor is BULK's cursor to go on from; empty when done.
	Cursor string
	Done   bool
	Sample []wire.BulkSample
}

func progressOf(r *http.Request) bulkProgress {
	num := func(name string) int { n, _ := strconv.Atoi(r.FormValue(name)); return max(n, 0) }
	p := bulkProgress{Count: num("count"), Skipped: num("skipped"), Expect: num("expect"), Cursor: r.FormValue("cursor")}
	for _, s := range r.Form["sample"] {
		if f := strings.Fields(s); len(f) == 3 && len(p.Sample) < sampleShown {
			p.Sample = append(p.Sample, wire.BulkSample{Tag: f[0], Subject: f[1], FireAt: f[2]})
		}
	}
	return p
}

// Samples are the sample as the continue form carries them.
func (p bulkProgress) Samples() []string {
	out := make([]string, 0, len(p.Sample))
	for _, s := range p.Sample {
		out = append(out, s.Tag+" "+s.Subject+" "+s.FireAt)
	}
	return out
}

type bulkData struct {
	Form bulkForm
	// Run is the dry run or the operation, nil on the bare form.
	Run *bulkProgress
	// Past is what the operation did, in words: "Canceled".
	Past string
	// RunErr is why a step was refused.
	RunErr *wire.ServiceError
}

// bulk is the page: the form, and with run=dry its dry run.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request) {
	d := bulkData{Form: bulkFormOf(r)}
	if r.FormValue("run") != "dry" {
		c.render(w, r, http.StatusOK, "bulk", Prefix+"bulk", "Bulk actions", d, nil)
		return
	}
	p := progressOf(r)
	p.Dry = true
	c.steps(w, r, d, p)
}

// bulkRun runs the operation the confirm form (or the continue form of
// its previous step) names.
func (c *Console) bulkRun(w http.ResponseWriter, r *http.Request) {
	c.steps(w, r, bulkData{Form: bulkFormOf(r)}, progressOf(r))
}

// steps runs steps of the dry run or the operation p, from its cursor,
// until it is done or BulkStepTime has passed, and renders the page with
// where it stands: a request is bounded by that time plus one step (at
// most 10,000 messages read), never by the size of the selection. When it
// is not done the page holds the form that goes on from the cursor.
func (c *Console) steps(w http.ResponseWriter, r *http.Request, d bulkData, p bulkProgress) {
	d.Run, d.Past = &p, bulkPast[d.Form.Verb]
	verb, req, err := d.Form.request()
	limit := dryStep
	if err == nil && !p.Dry {
		limit, err = d.Form.step()
	}
	s := c.service()
	if err == nil && s == nil {
		err = errStarting
	}
	status := http.StatusOK
	if err != nil {
		d.RunErr = wire.NewServiceError(err)
		status = httpStatus(err)
		c.render(w, r, status, "bulk", Prefix+"bulk", "Bulk actions", d, nil)
		return
	}
	req.DryRun, req.Limit = p.Dry, &limit
	start := time.Now()
	for {
		req.Cursor = p.Cursor
		rep, err := s.Bulk(verb, req)
		if err != nil {
			d.RunErr = wire.NewServiceError(err)
			status = httpStatus(err)
			break
		}
		p.Count += rep.Count
		p.Skipped += rep.Skipped
		for _, sm := range rep.Sample {
			if len(p.Sample) < sampleShown {
				p.Sample = append(p.Sample, sm)
			}
		}
		p.Cursor = rep.Cursor
		if p.Cursor == "" {
			p.Done = true
			break
		}
		if time.Since(start) >= c.cfg.BulkStepTime || r.Context().Err() != nil {
			break
		}
	}
	c.render(w, r, status, "bulk", Prefix+"bulk", "Bulk actions", d, nil)
}

// verbOption is one verb of the form's list.
type verbOption struct {
	Value, Label string
	Selected     bool
}

// Verbs are the form's verbs, its own selected.
func (f bulkForm) Verbs() []verbOption {
	out := []verbOption{
		{Value: "cancel", Label: "Cancel pending messages"},
		{Value: "reschedule", Label: "Reschedule pending messages (at or shift)"},
		{Value: "fire", Label: "Fire pending messages now"},
		{Value: "replay", Label: "Replay dead letters"},
		{Value: "delete", Label: "Delete dead letters"},
	}
	for i := range out {
		out[i].Selected = out[i].Value == f.Verb
	}
	return out
}

// Link is the page with the form filled in as f.
func (f bulkForm) Link() template.URL {
	return template.URL(Prefix + "bulk?" + f.Query())
}
