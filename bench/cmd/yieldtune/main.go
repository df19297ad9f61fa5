// Command yieldtune answers "which WithYieldAfter for my load?". It runs a
// synthetic load described by flags on seqsched once per threshold
// (10..50 by default), prints a table of throughput, waits, fairness and
// yields per threshold, and recommends one:
//
//	go run ./bench/cmd/yieldtune -sessions 500 -tasks 200 -work 50us -high 0.05
//
// Run with -h for the flags. -quick finishes in under 15 seconds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; it returns the exit code: 0, 1 for a failed run, 2
// for bad flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	var usage *usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "yieldtune: %v (see -h)\n", usage)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "yieldtune: %v\n", err)
		return 2
	}
	if err := sweep(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "yieldtune: %v\n", err)
		return 1
	}
	return 0
}

func describe(c config) string {
	over := fmt.Sprintf("over %s", c.duration.Round(time.Millisecond))
	switch {
	case c.paced && c.duration == 0:
		over = "as fast as the producers submit (tasks take no time)"
	case c.paced:
		over += fmt.Sprintf(" (offered %.2f× what the slots run)", c.load)
	}
	return fmt.Sprintf("%d sessions × %d tasks, work %s, sleep %s, High %.0f%%, max concurrency %d, %d producers, %s",
		c.sessions, c.tasks, c.work, c.sleep, c.high*100, c.maxConc, c.producers, over)
}

func sweep(ctx context.Context, c config, stdout, stderr io.Writer) error {
	ts := c.thresholds()
	total := c.sessions * c.tasks
	iters := c.spinIters()
	bar := progressbar.NewOptions(len(ts)*total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetVisibility(!c.noProgress),
		progressbar.OptionSetDescription("yieldtune"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	fmt.Fprintf(stdout, "load: %s\n\n", describe(c))
	rows := make([]row, 0, len(ts))
	for i, t := range ts {
		bar.Describe(fmt.Sprintf("WithYieldAfter(%d)", t))
		r, err := runOne(ctx, c, t, iters, func(done int) { _ = bar.Set(i*total + done) })
		if err != nil {
			return fmt.Errorf("WithYieldAfter(%d): %w", t, err)
		}
		rows = append(rows, summarize(r))
	}
	_ = bar.Finish()
	if err := writeTable(stdout, rows); err != nil {
		return err
	}
	_, why := recommend(rows)
	fmt.Fprintf(stdout, "\nrecommendation: %s\n", why)
	if c.csv != "" {
		if err := writeFile(c.csv, func(w io.Writer) error { return writeCSV(w, rows) }); err != nil {
			return err
		}
	}
	if c.svg != "" {
		title := fmt.Sprintf("yieldtune: %d sessions, work %s, High %.0f%%, max concurrency %d", c.sessions, c.work, c.high*100, c.maxConc)
		if err := writeFile(c.svg, func(w io.Writer) error { return writeSVG(w, rows, title) }); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}
