package console

import (
	"net/http"
	"strings"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// moveSource is what the message page's reschedule and fire now run:
// RESCHEDULE and FIRE.
type moveSource interface {
	Reschedule(wire.RescheduleRequest) (wire.RescheduleReply, error)
	Fire(wire.MessageRef) (wire.RescheduleReply, error)
}

func (c *Console) routeMove() {
	c.mux.HandleFunc("POST "+Prefix+"reschedule", c.reschedule)
	c.mux.HandleFunc("POST "+Prefix+"fire", c.fire)
}

// moveForm is the reschedule form as it was filled in.
type moveForm struct {
	At, Shift string
}

// reschedule moves the message the form names to the form's time, at or
// shift, as RESCHEDULE does, and shows its subject's list, where it has
// its new tag and place. A refusal
// (409 when it is in flight or an occurrence of a schedule) shows on the
// message's page, under the API's status.
func (c *Console) reschedule(w http.ResponseWriter, r *http.Request) {
	tag := r.PostFormValue("tag")
	f := moveForm{At: strings.TrimSpace(r.PostFormValue("at")), Shift: strings.TrimSpace(r.PostFormValue("shift"))}
	s := c.service()
	if s == nil {
		c.renderMessage(w, r, http.StatusOK, tag, f, errStarting)
		return
	}
	rep, err := s.Reschedule(wire.RescheduleRequest{Tag: tag, At: f.At, Shift: f.Shift})
	if err != nil {
		c.renderMessage(w, r, http.StatusOK, tag, f, err)
		return
	}
	c.redirect(w, r, Prefix+"subject?subject="+urlQuery(rep.Subject), "rescheduled", rep.Tag+" to fire at "+rep.FireAt)
}

// fire makes the message the form names due now, as FIRE does, and shows
// its subject's list (it is delivered at once, so it may be gone).
func (c *Console) fire(w http.ResponseWriter, r *http.Request) {
	tag := r.PostFormValue("tag")
	s := c.service()
	if s == nil {
		c.renderMessage(w, r, http.StatusOK, tag, moveForm{}, errStarting)
		return
	}
	rep, err := s.Fire(wire.MessageRef{Tag: tag})
	if err != nil {
		c.renderMessage(w, r, http.StatusOK, tag, moveForm{}, err)
		return
	}
	c.redirect(w, r, Prefix+"subject?subject="+urlQuery(rep.Subject), "fired", rep.Tag)
}
