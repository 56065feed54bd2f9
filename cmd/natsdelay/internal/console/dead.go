package console

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// deadSource is what the dead letters pages read, and the replay and
// delete they offer: DEAD.LIST, DEAD.GET, and BULK.REPLAY and BULK.DELETE
// of one dead letter by its tag.
type deadSource interface {
	DeadLetters(wire.DeadListRequest) (wire.DeadListReply, error)
	DeadLetter(wire.MessageRef) (wire.DeadLetterInfo, error)
	// Info is INFO's answer, for the retention of the dead letters.
	Info() (wire.InfoReply, error)
	bulkSource
}

func (c *Console) routeDead() {
	c.mux.HandleFunc("GET "+Prefix+"dead", c.dead)
	c.mux.HandleFunc("GET "+Prefix+"deadletter", c.deadLetter)
	c.mux.HandleFunc("POST "+Prefix+"dead/replay", c.deadReplay)
	c.mux.HandleFunc("POST "+Prefix+"dead/delete", c.deadDelete)
}

type deadData struct {
	Subject, After string
	Reply          wire.DeadListReply
	// Retention is how long dead letters are kept (INFO's
	// dead_retention), empty when INFO did not answer.
	Retention string
}

// dead lists the dead letters of a subject filter, a page at a time.
func (c *Console) dead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := deadData{Subject: strings.TrimSpace(q.Get("subject")), After: q.Get("after")}
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "dead", Prefix+"dead", "Dead letters", d, errStarting)
		return
	}
	limit := pageSize
	rep, err := s.DeadLetters(wire.DeadListRequest{Filter: wire.Filter{Subject: d.Subject}, After: d.After, Limit: &limit})
	d.Reply = rep
	if info, ierr := s.Info(); ierr == nil {
		d.Retention = retention(info.Config.DeadRetention)
	}
	c.render(w, r, http.StatusOK, "dead", Prefix+"dead", "Dead letters", d, err)
}

// retention says how long dead letters are kept, from INFO's
// dead_retention: a Go duration, or forever.
func retention(s string) string {
	if s == "forever" {
		return "until they are replayed or deleted"
	}
	span := s
	if d, err := time.ParseDuration(s); err == nil && d > 0 && d%(24*time.Hour) == 0 {
		span = fmt.Sprintf("%d days", d/(24*time.Hour))
		if d == 24*time.Hour {
			span = "1 day"
		}
	}
	return "for " + span + " from their death, unless replayed or deleted first"
}

type deadLetterData struct {
	Tag     string
	Dead    wire.DeadLetterInfo
	Headers []header
	payloadView
	// To is the replay form's other subject, kept when it is refused.
	To string
}

func (c *Console) deadLetter(w http.ResponseWriter, r *http.Request) {
	c.renderDeadLetter(w, r, http.StatusOK, r.URL.Query().Get("tag"), "", nil)
}

// renderDeadLetter renders the page of the dead letter tag, with the
// replay form's subject to, and the refusal failure of an action on it if
// there was one.
func (c *Console) renderDeadLetter(w http.ResponseWriter, r *http.Request, status int, tag, to string, failure error) {
	d := deadLetterData{Tag: tag, To: to}
	s := c.service()
	if s == nil {
		c.render(w, r, status, "deadletter", Prefix+"dead", "Dead letter", d, errStarting)
		return
	}
	dl, err := s.DeadLetter(wire.MessageRef{Tag: tag, Payload: true})
	if err != nil {
		if failure != nil {
			err = failure
		}
		c.render(w, r, status, "deadletter", Prefix+"dead", "Dead letter", d, err)
		return
	}
	d.Dead = dl
	d.Headers = headersOf(dl.Headers)
	d.payloadView = previewOf(dl.Payload)
	d.Dead.Payload = nil
	if failure != nil && status == http.StatusOK {
		status = httpStatus(failure)
	}
	c.render(w, r, status, "deadletter", Prefix+"dead", "Dead letter "+dl.Tag, d, failure)
}

// deadReplay replays the dead letter the form names, to its subject or
// to the form's other one, as BULK.REPLAY of its tag does, and goes back
// to the list, saying the new message's tag: it is due now, so it may be
// delivered and gone before its page could show it.
func (c *Console) deadReplay(w http.ResponseWriter, r *http.Request) {
	tag, to := r.PostFormValue("tag"), strings.TrimSpace(r.PostFormValue("to"))
	s := c.service()
	if s == nil {
		c.renderDeadLetter(w, r, http.StatusOK, tag, to, errStarting)
		return
	}
	if tag == "" {
		c.renderDeadLetter(w, r, http.StatusBadRequest, tag, to, badRequest(`give "tag": the dead letter to replay`))
		return
	}
	rep, err := s.Bulk("REPLAY", wire.BulkRequest{Filter: wire.Filter{Tag: tag}, ReplayTo: to})
	switch {
	case err != nil:
	case rep.Count == 1:
		c.redirect(w, r, Prefix+"dead", "replayed", rep.Sample[0].Tag)
		return
	case rep.Skipped > 0:
		err = wireErr(wire.ErrConflict, "the dead letter %s was not replayed: a pending message holds its Delay-Id; cancel that one first, or let it be delivered", tag)
	default:
		err = wireErr(wire.ErrNotFound, "no dead letter %s: replayed or deleted since, or expired", tag)
	}
	c.renderDeadLetter(w, r, http.StatusOK, tag, to, err)
}

// deadDelete deletes the dead letter the form names, as BULK.DELETE of
// its tag does, and goes back to the list.
func (c *Console) deadDelete(w http.ResponseWriter, r *http.Request) {
	tag := r.PostFormValue("tag")
	s := c.service()
	if s == nil {
		c.renderDeadLetter(w, r, http.StatusOK, tag, "", errStarting)
		return
	}
	if tag == "" {
		c.renderDeadLetter(w, r, http.StatusBadRequest, tag, "", badRequest(`give "tag": the dead letter to delete`))
		return
	}
	rep, err := s.Bulk("DELETE", wire.BulkRequest{Filter: wire.Filter{Tag: tag}})
	if err == nil && rep.Count == 0 {
		err = wireErr(wire.ErrNotFound, "no dead letter %s: replayed or deleted since, or expired", tag)
	}
	if err != nil {
		c.renderDeadLetter(w, r, http.StatusOK, tag, "", err)
		return
	}
	c.redirect(w, r, Prefix+"dead", "dead-deleted", tag)
}
