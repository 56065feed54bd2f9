package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// overviewSource is what the overview reads.
type overviewSource interface {
	totalsSource
	// Info is INFO's answer: counts, stats, settings, the cluster.
	Info() (wire.InfoReply, error)
	// ClusterInfo is the cluster's members on any node, nil outside one.
	ClusterInfo() *wire.ClusterInfo
	// Ready is nil when the service is ready, else why not.
	Ready() error
	// Role is the node's role in its cluster, "" outside one.
	Role() string
}

// overviewData is the overview page's data.
type overviewData struct {
	Ready   string
	ReadyOK bool
	Role    string
	Info    *wire.InfoReply
	InfoErr *wire.ServiceError
	Cluster *wire.ClusterInfo
	// LeaderConsole is the leader's console, when this node does not
	// lead and the leader told its HTTP listener.
	LeaderConsole string
	Windows       []window
	Chart         *chart
	// Every is the refresh interval, as htmx's trigger has it.
	Every string
}

func (c *Console) routeOverview() {
	c.mux.HandleFunc("GET "+Prefix+"{$}", c.overview)
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "overview", Prefix, "Overview", overviewData{Ready: "starting"}, errStarting)
		return
	}
	d := overviewData{Role: s.Role(), Every: strconv.Itoa(int(c.cfg.SampleEvery.Seconds()+0.5)) + "s"}
	if err := s.Ready(); err != nil {
		d.Ready = err.Error()
	} else {
		d.Ready, d.ReadyOK = "ready", true
	}
	if info, err := s.Info(); err != nil {
		d.InfoErr = wire.NewServiceError(err)
		d.Cluster = s.ClusterInfo()
	} else {
		d.Info, d.Cluster = &info, info.Cluster
	}
	d.LeaderConsole = leaderConsole(d.Cluster)
	now := sample{at: c.cfg.Now(), t: s.Totals()}
	samples := c.rates.all()
	ring := c.cfg.SampleEvery * time.Duration(c.cfg.Samples)
	for _, span := range []time.Duration{time.Minute, ring} {
		if wd, ok := windowOf(samples, now, span, "last "+fmtSpan(span)); ok && !hasSpan(d.Windows, wd.Seconds) {
			d.Windows = append(d.Windows, wd)
		}
	}
	d.Chart = newChart(append(samples, now))
	c.render(w, r, http.StatusOK, "overview", Prefix, "Overview", d, nil)
}

// leaderConsole is the URL of the console of ci's leader, when the
// leader is another node and answered with its HTTP listener.
func leaderConsole(ci *wire.ClusterInfo) string {
	if ci == nil || ci.LeaderID == "" || ci.LeaderID == ci.ID {
		return ""
	}
	for _, p := range ci.Peers {
		if p.ID == ci.LeaderID && p.HTTP != "" {
			return p.HTTP + Prefix
		}
	}
	return ""
}

// hasSpan reports whether a window of about secs is already shown: with
// few samples, the windows start at the same one.
func hasSpan(ws []window, secs float64) bool {
	for _, w := range ws {
		if w.Seconds == secs {
			return true
		}
	}
	return false
}

// fmtSpan writes a span for a reader: "minute", "5 minutes", "90s".
func fmtSpan(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "minute"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " minutes"
	}
	return d.Round(time.Second).String()
}

// chart is the rates between consecutive samples, drawn as SVG lines.
type chart struct {
	W, H                 int
	Ingest, Deliver, Ack string // polyline points
	Max                  string // the top of the scale, per second
	Span                 string // how far back the left edge is
}

// newChart draws the rates between consecutive samples; nil with fewer
// than three samples, which make no line.
func newChart(samples []sample) *chart {
	if len(samples) < 3 {
		return nil
	}
	ws := make([]window, 0, len(samples)-1)
	top := 1.0
	for i := 1; i < len(samples); i++ {
		w := between(samples[i-1], samples[i], "")
		ws = append(ws, w)
		top = max(top, w.Ingest, w.Deliver, w.Ack)
	}
	ch := &chart{W: 600, H: 120, Max: fmtRate(top), Span: samples[len(samples)-1].at.Sub(samples[0].at).Round(time.Second).String()}
	pts := func(f func(window) float64) string {
		var b strings.Builder
		for i, w := range ws {
			x := float64(i) * float64(ch.W) / float64(len(ws)-1)
			y := float64(ch.H) - f(w)/top*float64(ch.H-4)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		return strings.TrimSpace(b.String())
	}
	ch.Ingest = pts(func(w window) float64 { return w.Ingest })
	ch.Deliver = pts(func(w window) float64 { return w.Deliver })
	ch.Ack = pts(func(w window) float64 { return w.Ack })
	return ch
}

// fmtRate writes a rate per second: 0.25, 12.5, 1,250.
func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return fmtCount(uint64(v + 0.5))
}

// fmtCount writes n with thousands separators: 100,000.
func fmtCount(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
