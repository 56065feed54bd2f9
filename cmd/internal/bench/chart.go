package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// minLatenessMs is where the log axis starts: lateness at or below it
// (on time, to the resolution of the clocks) is drawn there.
const minLatenessMs = 0.01

// panelWidth and panelHeight are the size of each panel of the chart.
const (
	panelWidth  = 8 * vg.Inch
	panelHeight = 4.5 * vg.Inch
)

var (
	delayColors = []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}}
	jsColors    = []color.Color{color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}}
	coreColor   = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
)

// HasChart reports whether res has anything WritePNG draws: fire
// lateness or a throughput row.
func HasChart(res *Results) bool {
	return len(rateRows(res)) > 0 || slices.ContainsFunc(res.Fire, func(f FireResult) bool { return len(f.LatenessMs) > 0 })
}

// WritePNG draws res to path, one panel above the other: the lateness of
// every fire run as a cumulative distribution, natsdelay and JetStream on
// one log-scaled axis, and every throughput row of the table, natsdelay
// beside JetStream and the core baseline. A panel with nothing to draw is
// left out. The format follows path's extension, as plot.Save's does.
func WritePNG(path string, res *Results) (err error) {
	var panels []*plot.Plot
	if p, err := latenessPlot(res); err != nil {
		return err
	} else if p != nil {
		panels = append(panels, p)
	}
	if p, err := throughputPlot(res); err != nil {
		return err
	} else if p != nil {
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return fmt.Errorf("bench: chart: no fire or throughput results to draw")
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	c, err := draw.NewFormattedCanvas(panelWidth, panelHeight*vg.Length(len(panels)), format)
	if err != nil {
		return fmt.Errorf("bench: chart %s: %w", path, err)
	}
	// NB: not plot.Align: the panels' x axes have different units, and
	// aligning them would give the lateness panel the throughput panel's
	// wide row labels as a margin.
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: 0.2 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.1 * vg.Inch}
	dc := draw.New(c)
	for i, p := range panels {
		p.Draw(tiles.At(dc, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("bench: write %s: %w", path, cerr)
		}
	}()
	if _, err := c.WriteTo(f); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

// latenessPlot draws the lateness of every fire run, or is nil without one.
func latenessPlot(res *Results) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Fire lateness, %d msgs per run (%d cores): left is better", res.Config.FireMsgs, res.Host.Cores)
	p.X.Label.Text = "lateness (ms, log scale)"
	p.Y.Label.Text = "fraction delivered"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	// Top left is where the curves rarely are: a curve only gets near
	// 1 after its lateness passed the axis' first decades.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = 0.1 * vg.Inch
	colors := map[string][]color.Color{SystemDelay: delayColors, SystemJS: jsColors}
	seen := map[string]int{}
	for _, f := range res.Fire {
		if len(f.LatenessMs) == 0 {
			continue
		}
		l, err := plotter.NewLine(cdf(f.LatenessMs, 400))
		if err != nil {
			return nil, fmt.Errorf("bench: chart: %w", err)
		}
		cs := colors[f.System]
		l.Color = cs[seen[f.System]%len(cs)]
		l.Width = vg.Points(1.5)
		if f.System == SystemJS {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		seen[f.System]++
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s at %s/s", f.System, num(f.OfferedRate)), l)
	}
	if len(seen) == 0 {
		return nil, nil
	}
	return p, nil
}

// rateRow is one throughput row of the table, in msgs/s; NaN where a
// system has no figure.
type rateRow struct {
	label           string
	delay, js, core float64
}

// rateRows lists every throughput figure of res, in the table's order:
// ingest, the rate each fire run delivered, end to end, and the scale
// phase's fill rate, which is natsdelay's alone.
func rateRows(res *Results) []rateRow {
	var rows []rateRow
	for _, mode := range []string{"pipelined", "requesters"} {
		d, j, b := ingestRate(res, SystemDelay, mode), ingestRate(res, SystemJS, mode), ingestRate(res, SystemCore, mode)
		if !math.IsNaN(d) || !math.IsNaN(j) || !math.IsNaN(b) {
			rows = append(rows, rateRow{"ingest, " + ingestLabel(res.Config, mode), d, j, b})
		}
	}
	for _, rate := range res.Config.FireRates {
		d, j := fireFor(res, SystemDelay, rate), fireFor(res, SystemJS, rate)
		if d == nil && j == nil {
			continue
		}
		row := rateRow{fmt.Sprintf("fire at %s/s offered, delivered", num(rate)), math.NaN(), math.NaN(), math.NaN()}
		if d != nil {
			row.delay = d.DeliveredRate
		}
		if j != nil {
			row.js = j.DeliveredRate
		}
		rows = append(rows, row)
	}
	if len(res.EndToEnd) > 0 {
		row := rateRow{"end to end", math.NaN(), math.NaN(), math.NaN()}
		for _, r := range res.EndToEnd {
			switch r.System {
			case SystemDelay:
				row.delay = r.Rate
			case SystemJS:
				row.js = r.Rate
			}
		}
		rows = append(rows, row)
	}
	if s := res.Scale; s != nil && s.FillRate > 0 {
		rows = append(rows, rateRow{fmt.Sprintf("scale fill to %s, natsdelay only", num(float64(s.Pending))), s.FillRate, math.NaN(), math.NaN()})
	}
	return rows
}

// name is the row's label on the chart: with natsdelay against JetStream
// where both have a figure, as the table's ratio column says it.
func (r rateRow) name() string {
	if v := versus(r.delay, r.js, higher); v != "-" {
		return r.label + ": " + v
	}
	return r.label
}

// throughputPlot draws every throughput row as a dot per system on a
// log-scaled axis, the first row at the top, or is nil without rows.
func throughputPlot(res *Results) (*plot.Plot, error) {
	rows := rateRows(res)
	if len(rows) == 0 {
		return nil, nil
	}
	p := plot.New()
	// The ingest rows compare like for like only when both fsync every
	// acknowledged write, so the panel says whether they did. It is in the
	// title because a label as wide as the axis narrows the axis.
	p.Title.Text = "Throughput, natsdelay against JetStream: right is better\n(natsdelay fsyncs every acked batch, " + jsSyncShort(res.JetStreamSync) + ")"
	p.X.Label.Text = "msgs/s (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = commaTicks{plot.LogTicks{Prec: -1}}
	p.Add(plotter.NewGrid())
	names := make([]string, len(rows))
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, sys := range []struct {
		name  string
		value func(rateRow) float64
		color color.Color
		shape draw.GlyphDrawer
		// dy lifts or lowers the system's dots off the row's line, so
		// equal figures do not hide each other.
		dy float64
	}{
		{SystemDelay, func(r rateRow) float64 { return r.delay }, delayColors[0], draw.CircleGlyph{}, 0.12},
		{SystemJS, func(r rateRow) float64 { return r.js }, jsColors[0], draw.PyramidGlyph{}, -0.12},
		{"core req/reply (the NATS ceiling)", func(r rateRow) float64 { return r.core }, coreColor, draw.SquareGlyph{}, 0},
	} {
		var xys plotter.XYs
		for i, r := range rows {
			names[len(rows)-1-i] = r.name()
			if v := sys.value(r); v > 0 {
				xys = append(xys, plotter.XY{X: v, Y: float64(len(rows)-1-i) + sys.dy})
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		if len(xys) == 0 {
			continue
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, fmt.Errorf("bench: chart: %w", err)
		}
		s.GlyphStyle = draw.GlyphStyle{Color: sys.color, Radius: vg.Points(4), Shape: sys.shape}
		p.Add(s)
		p.Legend.Add(sys.name, s)
	}
	if math.IsInf(lo, 1) {
		return nil, nil
	}
	p.NominalY(names...)
	// A decade of room on either side keeps the dots off the frame and
	// the legend, which sits at the bottom right.
	p.X.Min, p.X.Max = lo/3, hi*10
	p.Y.Min, p.Y.Max = -0.5, float64(len(rows))-0.5
	p.Legend.Top = false
	return p, nil
}

// jsSyncShort is jsDurability in a few words.
func jsSyncShort(s *JetStreamSync) string {
	switch {
	case s == nil:
		return "jetstream as its server is set"
	case s.Always:
		return "jetstream every write"
	}
	return "jetstream every " + s.Interval
}

// commaTicks labels a tick as the table writes a rate, 100,000 rather
// than 100000 or 1e+06.
type commaTicks struct{ plot.Ticker }

func (t commaTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := t.Ticker.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = num(ticks[i].Value)
		}
	}
	return ticks
}

// cdf samples the sorted values at up to n points as (value, fraction).
func cdf(sorted []float64, n int) plotter.XYs {
	step := max(1, len(sorted)/n)
	xys := make(plotter.XYs, 0, len(sorted)/step+1)
	for i := 0; i < len(sorted); i += step {
		xys = append(xys, plotter.XY{X: math.Max(sorted[i], minLatenessMs), Y: float64(i+1) / float64(len(sorted))})
	}
	xys = append(xys, plotter.XY{X: math.Max(sorted[len(sorted)-1], minLatenessMs), Y: 1})
	return xys
}
