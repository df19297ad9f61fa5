package main

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	bandColor = color.RGBA{R: 0xd8, G: 0xe8, B: 0xd0, A: 0xff} // indistinguishable from the pick
	pickColor = color.RGBA{R: 0x2a, G: 0x8a, B: 0x2a, A: 0xff}
	dataColor = color.RGBA{R: 0x20, G: 0x40, B: 0xa0, A: 0xff}
)

// errorPoints is a series of medians with their ranges, for
// plotter.NewYErrorBars.
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

// writeChart draws aligned charts against the threshold of the figures the
// rule compares: throughput, p99 wait over all tasks and, if the load has
// High tasks, their p99 wait. Each
// threshold's median over the rounds as a dot, its range as a bar. The
// recommended threshold is a vertical line, and the thresholds
// indistinguishable from it are shaded. There is no legend to overlap the
// data: the x axis' label says what the marks mean. format is "svg" or
// "png".
func writeChart(w io.Writer, format string, results []result, j judgement, title string) error {
	top := plot.New()
	top.Title.Text = title + "\n" + chartVerdict(j)
	top.Y.Label.Text = "throughput (tasks/s)"
	all := plot.New()
	all.Y.Label.Text = "p99 wait, all tasks (ms)"
	plots := []*plot.Plot{top, all}
	ms := func(f func(result) spread) func(result) spread {
		return func(r result) spread {
			s := f(r)
			return spread{Med: s.Med * 1e3, Lo: s.Lo * 1e3, Hi: s.Hi * 1e3}
		}
	}
	figs := []func(result) spread{
		func(r result) spread { return r.Throughput },
		ms(func(r result) spread { return r.P99 }),
	}
	if slices.ContainsFunc(results, func(r result) bool { return r.Median.HighTasks > 0 }) {
		high := plot.New()
		high.Y.Label.Text = "p99 wait, High tasks (ms)"
		plots = append(plots, high)
		figs = append(figs, ms(func(r result) spread { return r.HighP99 }))
	}
	bottom := plots[len(plots)-1]
	bottom.X.Label.Text = fmt.Sprintf("WithYieldAfter (* the default)\n"+
		"dot: median of %d rounds, bar: best to worst round\n"+
		"dashed line: recommended, shaded: indistinguishable from it", roundsOf(results))

	for i, p := range plots {
		if err := drawFigure(p, results, j, figs[i]); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}

	// 7 inches wide; 3.5 inches a chart, and room for the titles.
	width, height := 7*vg.Inch, vg.Length(len(plots))*3.5*vg.Inch
	var canvas vg.CanvasWriterTo
	switch format {
	case "svg":
		canvas = vgsvg.New(width, height)
	case "png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	default:
		return fmt.Errorf("chart format %q: want svg or png", format)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(16), PadY: vg.Points(12)}
	grid := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(grid, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	_, err := canvas.WriteTo(w)
	return err
}

// chartVerdict is the chart's one-line answer.
func chartVerdict(j judgement) string {
	if j.Changed {
		return fmt.Sprintf("recommended: WithYieldAfter(%d), measurably better than the default (%d)", j.Pick, j.Default)
	}
	return fmt.Sprintf("no threshold measurably better: keep the default, WithYieldAfter(%d)", j.Default)
}

func roundsOf(results []result) int {
	if len(results) == 0 {
		return 0
	}
	return len(results[0].Rounds)
}

// drawFigure adds one figure to p: the band, the pick's line, the ranges
// and the medians, in that order so that the data is drawn on top.
func drawFigure(p *plot.Plot, results []result, j judgement, fig func(result) spread) error {
	var pts errorPoints
	top := 0.0
	for _, r := range results {
		s := fig(r)
		pts.XYs = append(pts.XYs, plotter.XY{X: float64(r.Threshold), Y: s.Med})
		pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{s.Med - s.Lo, s.Hi - s.Med})
		top = max(top, s.Hi)
	}
	if top <= 0 {
		top = 1
	}
	top *= 1.1                // room above the highest bar
	p.Y.Min, p.Y.Max = 0, top // a zero baseline keeps small differences small
	p.Y.Tick.Marker = plainTicks{}

	// Each indistinguishable threshold shades the x range half way to its
	// neighbours; adjacent ones make one band.
	xs := thresholdsOf(results)
	for i := 0; i < len(xs); i++ {
		if !slices.Contains(j.Band, xs[i]) {
			continue
		}
		lo, hi := halfway(xs, i)
		for i+1 < len(xs) && slices.Contains(j.Band, xs[i+1]) {
			i++
			_, hi = halfway(xs, i)
		}
		band, err := plotter.NewPolygon(plotter.XYs{{X: lo, Y: 0}, {X: hi, Y: 0}, {X: hi, Y: top}, {X: lo, Y: top}})
		if err != nil {
			return err
		}
		band.Color = bandColor
		band.LineStyle.Width = 0
		p.Add(band)
	}
	p.Add(plotter.NewGrid())
	pick, err := plotter.NewLine(plotter.XYs{{X: float64(j.Pick), Y: 0}, {X: float64(j.Pick), Y: top}})
	if err != nil {
		return err
	}
	pick.Color = pickColor
	pick.Width = vg.Points(1.5)
	pick.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	p.Add(pick)

	bars, err := plotter.NewYErrorBars(pts)
	if err != nil {
		return err
	}
	bars.Color = dataColor
	bars.Width = vg.Points(1.2)
	bars.CapWidth = vg.Points(8)
	dots, err := plotter.NewScatter(pts.XYs)
	if err != nil {
		return err
	}
	dots.GlyphStyle.Color = dataColor
	dots.GlyphStyle.Shape = draw.CircleGlyph{}
	dots.GlyphStyle.Radius = vg.Points(3)
	p.Add(bars, dots)

	// Ticks at the thresholds measured, the default starred.
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		label := strconv.Itoa(x)
		if x == j.Default {
			label += "*"
		}
		ticks[i] = plot.Tick{Value: float64(x), Label: label}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	lo, _ := halfway(xs, 0)
	_, hi := halfway(xs, len(xs)-1)
	p.X.Min, p.X.Max = lo, hi
	return nil
}

// halfway is the x range around xs[i], half way to its neighbours; the
// first and last reach as far out as they reach in.
func halfway(xs []int, i int) (lo, hi float64) {
	gap := func(a, b int) float64 { return float64(xs[b]-xs[a]) / 2 }
	switch {
	case len(xs) == 1:
		return float64(xs[0]) - 5, float64(xs[0]) + 5
	case i == 0:
		g := gap(0, 1)
		return float64(xs[0]) - g, float64(xs[0]) + g
	case i == len(xs)-1:
		g := gap(i-1, i)
		return float64(xs[i]) - g, float64(xs[i]) + g
	}
	return float64(xs[i]) - gap(i-1, i), float64(xs[i]) + gap(i, i+1)
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// ("250", not "250.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
	}
	return ticks
}
