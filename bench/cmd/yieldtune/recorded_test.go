package main

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readRecorded reads a sweep that the tool wrote with -csv back into
// results, thresholds in the order of the file, so that the rule can be
// applied to recorded measurements. Lines starting with # are comments
// (the tool writes none; fixtures say where they come from).
func readRecorded(t *testing.T, name string) []result {
	t.Helper()
	return readRecordedPath(t, filepath.Join("testdata", name))
}

func readRecordedPath(t *testing.T, name string) []result {
	t.Helper()
	recs := readRecords(t, name)
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, h := range []string{
		"yield_after", "tasks", "high_tasks", "yields", "tasks_per_s", "all_p99_us", "high_p99_us",
	} {
		require.Contains(t, col, h, "%s: column %s", name, h)
	}
	num := func(rec []string, h string) float64 {
		i, ok := col[h]
		if !ok {
			return 0
		}
		x, err := strconv.ParseFloat(rec[i], 64)
		require.NoError(t, err, "%s: column %s", name, h)
		return x
	}
	us := func(rec []string, h string) time.Duration {
		return time.Duration(num(rec, h) * float64(time.Microsecond))
	}
	var order []int
	rounds := map[int][]row{}
	for _, rec := range recs[1:] {
		r := row{
			Threshold:           int(num(rec, "yield_after")),
			Tasks:               int(num(rec, "tasks")),
			HighTasks:           int(num(rec, "high_tasks")),
			Yields:              uint64(num(rec, "yields")),
			Throughput:          num(rec, "tasks_per_s"),
			AllP99:              us(rec, "all_p99_us"),
			HighP99:             us(rec, "high_p99_us"),
			NormalP50:           us(rec, "normal_p50_us"),
			NormalP99:           us(rec, "normal_p99_us"),
			NormalMax:           us(rec, "normal_max_us"),
			HighP50:             us(rec, "high_p50_us"),
			HighMax:             us(rec, "high_max_us"),
			Jain:                num(rec, "jain"),
			WorstSessionMaxWait: us(rec, "worst_session_max_wait_us"),
			YieldsPerSec:        num(rec, "yields_per_s"),
		}
		if !slices.Contains(order, r.Threshold) {
			order = append(order, r.Threshold)
		}
		rounds[r.Threshold] = append(rounds[r.Threshold], r)
	}
	results := make([]result, len(order))
	for i, th := range order {
		results[i] = aggregate(th, rounds[th])
	}
	return results
}

// readRecords reads a CSV file, skipping comments; it has a header.
func readRecords(t *testing.T, name string) [][]string {
	t.Helper()
	f, err := os.Open(name)
	require.NoError(t, err)
	defer f.Close()
	cr := csv.NewReader(f)
	cr.Comment = '#'
	recs, err := cr.ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, recs, name)
	return recs
}

// recordedColumn is one column of a recorded sweep, one value per record.
func recordedColumn(t *testing.T, path, name string) []string {
	t.Helper()
	recs := readRecords(t, path)
	i := slices.Index(recs[0], name)
	require.GreaterOrEqual(t, i, 0, "column %s in %v", name, recs[0])
	var out []string
	for _, rec := range recs[1:] {
		out = append(out, rec[i])
	}
	return out
}
