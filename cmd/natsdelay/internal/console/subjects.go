package console

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// subjectsSource is what the subjects, a subject's messages and a
// message's page read, and the cancel they offer.
type subjectsSource interface {
	Subjects(wire.SubjectsRequest) (wire.SubjectsReply, error)
	List(wire.ListRequest) (wire.ListReply, error)
	Get(wire.MessageRef) (wire.MessageInfo, error)
	CancelRef(context.Context, wire.MessageRef) error
}

// pageSize is how many rows a page of subjects or messages shows.
const pageSize = 50

// previewLimit is how much of a payload a message's page shows.
const previewLimit = 4096

// cancelTimeout bounds a cancel, as the API's does.
const cancelTimeout = 10 * time.Second

func (c *Console) routeSubjects() {
	c.mux.HandleFunc("GET "+Prefix+"subjects", c.subjects)
	c.mux.HandleFunc("GET "+Prefix+"subject", c.subject)
	c.mux.HandleFunc("GET "+Prefix+"message", c.message)
	c.mux.HandleFunc("POST "+Prefix+"cancel", c.cancel)
}

type subjectsData struct {
	Filter, After string
	Reply         wire.SubjectsReply
}

func (c *Console) subjects(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := subjectsData{Filter: strings.TrimSpace(q.Get("filter")), After: q.Get("after")}
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "subjects", Prefix+"subjects", "Subjects", d, errStarting)
		return
	}
	limit := pageSize
	rep, err := s.Subjects(wire.SubjectsRequest{Filter: d.Filter, After: d.After, Limit: &limit})
	d.Reply = rep
	c.render(w, r, http.StatusOK, "subjects", Prefix+"subjects", "Subjects", d, err)
}

type subjectData struct {
	Subject, After string
	Reply          wire.ListReply
}

func (c *Console) subject(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := subjectData{Subject: q.Get("subject"), After: q.Get("after")}
	title := "Subject " + d.Subject
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "subject", Prefix+"subjects", title, d, errStarting)
		return
	}
	limit := pageSize
	rep, err := s.List(wire.ListRequest{Subject: d.Subject, After: d.After, Limit: &limit})
	d.Reply = rep
	c.render(w, r, http.StatusOK, "subject", Prefix+"subjects", title, d, err)
}

type header struct {
	Name   string
	Values []string
}

type messageData struct {
	Tag     string
	Msg     wire.MessageInfo
	Headers []header
	payloadView
	// Next are a schedule's next times in its zone and in UTC.
	Next []zoned
	// Move is the reschedule form as it was filled in, kept when it is
	// refused.
	Move moveForm
}

// payloadView is a payload's preview: Text when it is text, Hex when it
// is not; Cut is set when it is only the first previewLimit bytes.
type payloadView struct {
	Text, Hex string
	IsText    bool
	Shown     int
	Cut       bool
}

// previewOf is the preview of payload p.
func previewOf(p []byte) payloadView {
	var v payloadView
	if len(p) > previewLimit {
		p, v.Cut = p[:previewLimit], true
	}
	v.Shown = len(p)
	if printable(p, v.Cut) {
		v.Text, v.IsText = string(p), true
	} else {
		v.Hex = hex.Dump(p)
	}
	return v
}

// headersOf are headers h sorted by name.
func headersOf(h map[string][]string) []header {
	out := make([]header, 0, len(h))
	for name, vs := range h {
		out = append(out, header{name, vs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// zoned is one time in a schedule's zone and in UTC.
type zoned struct{ Local, UTC string }

func (c *Console) message(w http.ResponseWriter, r *http.Request) {
	c.renderMessage(w, r, http.StatusOK, r.URL.Query().Get("tag"), moveForm{}, nil)
}

// renderMessage renders the page of the message tag, with the reschedule
// form as f, and the refusal failure of an action on it if there was one
// (under its status).
func (c *Console) renderMessage(w http.ResponseWriter, r *http.Request, status int, tag string, f moveForm, failure error) {
	d := messageData{Tag: tag, Move: f}
	s := c.service()
	if s == nil {
		c.render(w, r, status, "message", Prefix+"subjects", "Message", d, errStarting)
		return
	}
	m, err := s.Get(wire.MessageRef{Tag: d.Tag, Payload: true})
	if err != nil {
		if failure != nil {
			err = failure
		}
		c.render(w, r, status, "message", Prefix+"subjects", "Message", d, err)
		return
	}
	d.Msg = m
	d.Headers = headersOf(m.Headers)
	d.payloadView = previewOf(m.Payload)
	if m.Schedule != nil {
		d.Next = inZone(m.Schedule.Zone, m.Schedule.Next)
	}
	d.Msg.Payload = nil
	if failure != nil && status == http.StatusOK {
		status = httpStatus(failure)
	}
	c.render(w, r, status, "message", Prefix+"subjects", "Message "+m.Tag, d, failure)
}

// printable reports whether p reads as text: valid UTF-8 without control
// characters but tabs and line breaks. A preview cut in the middle of a
// character is still text.
func printable(p []byte, cut bool) bool {
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		if r == utf8.RuneError && n <= 1 {
			if cut && len(p) < utf8.UTFMax && !utf8.FullRune(p) {
				return true
			}
			return false
		}
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
		p = p[n:]
	}
	return true
}

// inZone writes each of times, as the service writes them (RFC 3339 in
// UTC), in zone and in UTC.
func inZone(zone string, times []string) []zoned {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		loc = time.UTC
	}
	out := make([]zoned, 0, len(times))
	for _, s := range times {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			out = append(out, zoned{s, s})
			continue
		}
		out = append(out, zoned{Local: t.In(loc).Format("2006-01-02 15:04:05 MST"), UTC: t.UTC().Format("2006-01-02 15:04:05Z")})
	}
	return out
}

// cancel cancels the message (or the schedule) a form names, as CANCEL
// does, and goes back to the page the form came from.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request) {
	tag := r.PostFormValue("tag")
	back := r.PostFormValue("back")
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "message", Prefix+"subjects", "Message", messageData{Tag: tag}, errStarting)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), cancelTimeout)
	defer cancel()
	if err := s.CancelRef(ctx, wire.MessageRef{Tag: tag}); err != nil {
		c.render(w, r, http.StatusOK, "message", Prefix+"subjects", "Message", messageData{Tag: tag}, err)
		return
	}
	done := "canceled"
	target := Prefix + "subject?subject=" + url.QueryEscape(r.PostFormValue("subject"))
	if back == "schedules" {
		done, target = "schedule-cancel", Prefix+"schedules"
	}
	c.redirect(w, r, target, done, tag)
}

// urlQuery escapes s for a query.
func urlQuery(s string) string { return url.QueryEscape(s) }

// itoa is strconv.Itoa for the templates.
func itoa(n int) string { return strconv.Itoa(n) }
