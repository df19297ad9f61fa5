package main

import (
	"fmt"
	"image/color"
	"io"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	bandColor    = color.RGBA{R: 0xe4, G: 0xe4, B: 0xe4, A: 0xff} // the default's range
	pickColor    = color.RGBA{R: 0x20, G: 0x40, B: 0xa0, A: 0xff}
	defaultColor = color.RGBA{A: 0xff}
	sameColor    = color.RGBA{R: 0x70, G: 0x70, B: 0x70, A: 0xff}
	betterColor  = color.RGBA{R: 0x1a, G: 0x7a, B: 0x1a, A: 0xff}
	worseColor   = color.RGBA{R: 0xb8, G: 0x20, B: 0x20, A: 0xff}
)

// errorPoints is a series of medians with their ranges, for
// plotter.NewYErrorBars.
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

// writeChart draws aligned charts against the threshold, one per figure
// the rule weighs (p99 wait over all tasks, throughput and, if the load
// has High tasks, their p99 wait), thresholds in the order of the sweep.
// Each threshold's median over the rounds is a dot, its range a bar, and
// beside it the table's words for it ("+12% worse"), in the rule's colour:
// the chart says what the text says. The default's range is shaded across
// each chart, the recommendation (the default when it stays) is a dashed
// vertical line, and the title is the recommendation itself. There is no
// legend to overlap the data: the x axis' label says what the marks mean.
// format is "svg" or "png".
func writeChart(w io.Writer, format string, results []result, j judgement, title string) error {
	figs := j.figures()
	plots := make([]*plot.Plot, len(figs))
	for i, f := range figs {
		p := plot.New()
		p.Y.Label.Text = yLabel(f)
		if f == j.Objective {
			p.Y.Label.Text += ", the objective"
		}
		if err := drawFigure(p, results, j, f); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		plots[i] = p
	}
	plots[0].Title.Text = title + "\n" + j.Answer
	bottom := plots[len(plots)-1]
	bottom.X.Tick.Marker = plot.ConstantTicks(thresholdTicks(thresholdsOf(results), j, true))
	bottom.X.Label.Text = "WithYieldAfter (* the default) and its verdict, dashed line: recommended\n" +
		"dot: median over the rounds, bar: best to worst round\n" +
		"shaded: the default's range; words: the median's change and the rule's word"

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

// yLabel is a figure's axis: waits in milliseconds.
func yLabel(f figure) string {
	return [...]string{"p99 wait, all tasks (ms)", "throughput (tasks/s)", "p99 wait, High tasks (ms)"}[f]
}

// drawFigure adds figure f to p: the default's range, the recommendation's
// line, the ranges, the medians and their words, in that order so that the
// data is drawn on top.
func drawFigure(p *plot.Plot, results []result, j judgement, f figure) error {
	scale := 1e3 // waits in ms
	if f == figThroughput {
		scale = 1
	}
	var pts errorPoints
	var said plotter.XYLabels
	var styles []draw.GlyphStyle
	top := 0.0
	var base spread
	for _, r := range results {
		s := f.of(r)
		s = spread{Med: s.Med * scale, Lo: s.Lo * scale, Hi: s.Hi * scale}
		if r.Threshold == j.Default {
			base = s
		}
		pts.XYs = append(pts.XYs, plotter.XY{X: float64(r.Threshold), Y: s.Med})
		pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{s.Med - s.Lo, s.Hi - s.Med})
		said.XYs = append(said.XYs, plotter.XY{X: float64(r.Threshold), Y: s.Med})
		said.Labels = append(said.Labels, j.cell(r.Threshold, f))
		styles = append(
			styles,
			draw.GlyphStyle{Color: relColor(j, r.Threshold, f), Shape: draw.CircleGlyph{}, Radius: vg.Points(3)},
		)
		top = max(top, s.Hi)
	}
	if top <= 0 {
		top = 1
	}
	top *= 1.1                // room above the highest bar
	p.Y.Min, p.Y.Max = 0, top // a zero baseline keeps small differences small
	p.Y.Tick.Marker = plainTicks{}

	xs := thresholdsOf(results)
	lo, _ := halfway(xs, 0)
	_, hi := halfway(xs, len(xs)-1)
	hi += (hi - lo) / 8 // room for the last threshold's words
	p.X.Min, p.X.Max = lo, hi
	band, err := plotter.NewPolygon(
		plotter.XYs{{X: lo, Y: base.Lo}, {X: hi, Y: base.Lo}, {X: hi, Y: base.Hi}, {X: lo, Y: base.Hi}},
	)
	if err != nil {
		return err
	}
	band.Color = bandColor
	band.LineStyle.Width = 0
	p.Add(band, plotter.NewGrid())

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
	bars.Color = sameColor
	bars.Width = vg.Points(1.2)
	bars.CapWidth = vg.Points(8)
	dots, err := plotter.NewScatter(pts.XYs)
	if err != nil {
		return err
	}
	dots.GlyphStyleFunc = func(i int) draw.GlyphStyle { return styles[i] }
	labels, err := plotter.NewLabels(said)
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Color = styles[i].Color
		labels.TextStyle[i].YAlign = text.YCenter
	}
	labels.Offset = vg.Point{X: vg.Points(7)}
	p.Add(bars, dots, words{labels})

	p.X.Tick.Marker = plot.ConstantTicks(thresholdTicks(xs, j, false))
	return nil
}

// thresholdTicks are ticks at the thresholds measured, the default
// starred, and, with verdicts, each threshold's verdict below it: the
// table's last column.
func thresholdTicks(xs []int, j judgement, verdicts bool) []plot.Tick {
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		label := strconv.Itoa(x)
		if x == j.Default {
			label += "*"
		}
		if verdicts {
			label += "\n" + j.verdictCell(x)
		}
		ticks[i] = plot.Tick{Value: float64(x), Label: label}
	}
	return ticks
}

// words draws labels beside the dots without reserving room for them:
// plotter.Labels' glyph boxes made gonum shrink one chart's data area and
// not its axis, so the marks no longer stood over their ticks.
type words struct{ l *plotter.Labels }

func (w words) Plot(c draw.Canvas, p *plot.Plot) { w.l.Plot(c, p) }

// relColor is the colour of threshold t's dot and words on figure f.
func relColor(j judgement, t int, f figure) color.Color {
	a := j.assessmentOf(t)
	switch {
	case a.Verdict == isDefault:
		return defaultColor
	case !j.Applies:
		return sameColor
	case a.Figures[f].Rel == better:
		return betterColor
	case a.Figures[f].Rel == worse:
		return worseColor
	}
	return sameColor
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
