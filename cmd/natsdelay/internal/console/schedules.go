package console

import (
	"context"
	"net/http"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// schedulesSource is what the schedules page reads, and the cancel it
// offers.
type schedulesSource interface {
	Schedules(wire.SchedulesRequest) (wire.SchedulesReply, error)
	CancelRef(context.Context, wire.MessageRef) error
}

func (c *Console) routeSchedules() {
	c.mux.HandleFunc("GET "+Prefix+"schedules", c.schedules)
}

// scheduleRow is one schedule with its next times in its zone and UTC.
type scheduleRow struct {
	Msg       wire.MessageInfo
	Next      []zoned
	Remaining string
}

type schedulesData struct {
	Subject, After string
	Rows           []scheduleRow
	Next           string
}

func (c *Console) schedules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := schedulesData{Subject: q.Get("subject"), After: q.Get("after")}
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", d, errStarting)
		return
	}
	limit := pageSize
	rep, err := s.Schedules(wire.SchedulesRequest{Subject: d.Subject, After: d.After, Limit: &limit})
	if err != nil {
		c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", d, err)
		return
	}
	d.Next = rep.Next
	for _, m := range rep.Schedules {
		row := scheduleRow{Msg: m, Remaining: "no limit"}
		if sc := m.Schedule; sc != nil {
			row.Next = inZone(sc.Zone, sc.Next)
			if sc.Limit > 0 {
				done := sc.Fired + sc.Skipped
				row.Remaining = "0"
				if done < sc.Limit {
					row.Remaining = fmtCount(sc.Limit - done)
				}
			}
		}
		d.Rows = append(d.Rows, row)
	}
	c.render(w, r, http.StatusOK, "schedules", Prefix+"schedules", "Schedules", d, nil)
}
