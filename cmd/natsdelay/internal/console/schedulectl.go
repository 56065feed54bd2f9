package console

import (
	"net/http"
	"strconv"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// scheduleCtlSource is what the schedules page's pause, resume and
// trigger run: SCHEDULE.PAUSE, .RESUME and .TRIGGER.
type scheduleCtlSource interface {
	PauseSchedule(ref wire.MessageRef, pause bool) (wire.MessageInfo, error)
	TriggerSchedule(ref wire.MessageRef) (wire.TriggerReply, error)
	SkipSchedule(r wire.ScheduleSkipRequest) (wire.MessageInfo, error)
}

func (c *Console) routeScheduleCtl() {
	c.mux.HandleFunc("POST "+Prefix+"schedule-pause", c.schedulePause)
	c.mux.HandleFunc("POST "+Prefix+"schedule-trigger", c.scheduleTrigger)
	c.mux.HandleFunc("POST "+Prefix+"schedule-skip", c.scheduleSkip)
}

// scheduleSkip skips the next "count" occurrences of the schedule whose
// occurrence's tag the form gives (SCHEDULE.SKIP), and shows the
// schedules again, their next times without the skipped ones.
func (c *Console) scheduleSkip(w http.ResponseWriter, r *http.Request) {
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", schedulesData{}, errStarting)
		return
	}
	// A count that does not parse is 0, which the service refuses with
	// what it accepts.
	n, _ := strconv.ParseUint(r.PostFormValue("count"), 10, 64)
	mi, err := s.SkipSchedule(wire.ScheduleSkipRequest{Tag: r.PostFormValue("tag"), Count: n})
	if err != nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", schedulesData{}, err)
		return
	}
	c.redirect(w, r, Prefix+"schedules", "schedule-skipped", scheduleName(mi))
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
