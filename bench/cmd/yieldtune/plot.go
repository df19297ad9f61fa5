package main

import (
	"fmt"
	"io"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writeSVG draws two aligned charts against the threshold: throughput, and
// the p99 waits (all tasks, Normal, High) in milliseconds.
func writeSVG(w io.Writer, rows []row, title string) error {
	tput := make(plotter.XYs, len(rows))
	all := make(plotter.XYs, len(rows))
	normal := make(plotter.XYs, len(rows))
	high := make(plotter.XYs, len(rows))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for i, r := range rows {
		x := float64(r.Threshold)
		tput[i] = plotter.XY{X: x, Y: r.Throughput}
		all[i] = plotter.XY{X: x, Y: ms(r.AllP99)}
		normal[i] = plotter.XY{X: x, Y: ms(r.NormalP99)}
		high[i] = plotter.XY{X: x, Y: ms(r.HighP99)}
	}

	top := plot.New()
	top.Title.Text = title
	top.X.Label.Text = "WithYieldAfter"
	top.Y.Label.Text = "throughput (tasks/s)"
	if err := plotutil.AddLinePoints(top, "throughput", tput); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	bottom := plot.New()
	bottom.X.Label.Text = "WithYieldAfter"
	bottom.Y.Label.Text = "p99 wait (ms)"
	if err := plotutil.AddLinePoints(bottom, "all tasks", all, "Normal", normal, "High", high); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.XOffs = -vg.Points(8)
		p.Y.Min = 0 // a zero baseline keeps small differences small
	}
	top.Legend.Top = false // the throughput line runs along the top

	img := vgsvg.New(7*vg.Inch, 7*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(16), PadY: vg.Points(12)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	_, err := img.WriteTo(w)
	return err
}
