package bench

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// minLatenessMs is where the log axis starts: lateness at or below it
// (on time, to the resolution of the clocks) is drawn there.
const minLatenessMs = 0.01

// WritePNG draws the lateness of every fire run as a cumulative
// distribution, natsdelay and JetStream on one log-scaled axis, to path.
func WritePNG(path string, res *Results) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Fire lateness, %d msgs per run (%d cores)", res.Config.FireMsgs, res.Host.Cores)
	p.X.Label.Text = "lateness (ms, log scale)"
	p.Y.Label.Text = "fraction delivered"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	// NB: top left is where the curves rarely are: a curve only gets near
	// 1 after its lateness passed the axis' first decades.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = 0.1 * vg.Inch
	colors := map[string][]color.Color{
		SystemDelay: {color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}},
		SystemJS:    {color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}},
	}
	seen := map[string]int{}
	for _, f := range res.Fire {
		if len(f.LatenessMs) == 0 {
			continue
		}
		l, err := plotter.NewLine(cdf(f.LatenessMs, 400))
		if err != nil {
			return fmt.Errorf("bench: chart: %w", err)
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
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
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
