package console

import (
	"net/http"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// scheduleCtlSource is what the schedules page's pause, resume and
// trigger run: SCHEDULE.PAUSE, .RESUME and .TRIGGER.
type scheduleCtlSource interface {
	PauseSchedule(ref wire.MessageRef, pause bool) (wire.MessageInfo, error)
	TriggerSchedule(ref wire.MessageRef) (wire.TriggerReply, error)
}

func (c *Console) routeScheduleCtl() {
	c.mux.HandleFunc("POST "+Prefix+"schedule-pause", c.schedulePause)
	c.mux.HandleFunc("POST "+Prefix+"schedule-trigger", c.scheduleTrigger)
}

// schedulePause pauses (action pause) or resumes the schedule whose
// occurrence's tag the form gives, and shows the schedules again; a
// refusal shows on the schedules page, under the API's status.
func (c *Console) schedulePause(w http.ResponseWriter, r *http.Request) {
	ref := wire.MessageRef{Tag: r.PostFormValue("tag")}
	pause := r.PostFormValue("action") == "pause"
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", schedulesData{}, errStarting)
		return
	}
	mi, err := s.PauseSchedule(ref, pause)
	if err != nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", schedulesData{}, err)
		return
	}
	done := "schedule-resumed"
	if pause {
		done = "schedule-paused"
	}
	c.redirect(w, r, Prefix+"schedules", done, scheduleName(mi))
}

// scheduleTrigger delivers one extra occurrence of the schedule whose
// occurrence's tag the form gives, and shows the schedules again.
func (c *Console) scheduleTrigger(w http.ResponseWriter, r *http.Request) {
	ref := wire.MessageRef{Tag: r.PostFormValue("tag")}
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", schedulesData{}, errStarting)
		return
	}
	tr, err := s.TriggerSchedule(ref)
	if err != nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", schedulesData{}, err)
		return
	}
	c.redirect(w, r, Prefix+"schedules", "schedule-triggered", tr.Subject+" "+tr.Name)
}

// scheduleName is "<subject> <name>" of the schedule mi is an occurrence of.
func scheduleName(mi wire.MessageInfo) string {
	if mi.Schedule == nil {
		return mi.Subject
	}
	return mi.Subject + " " + mi.Schedule.Name
}
