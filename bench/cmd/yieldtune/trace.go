package main

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// A trace is a recorded load, one task per CSV row:
//
//	offset,session,priority,work,sleep
//	0s,alice,normal,120us,0s
//	150us,bob,high,80us,2ms
//
// offset is when the task arrived, from the start of the recording; session
// is the task's key (any text); priority is high or normal; work is the CPU
// time the task spends and sleep the time it waits (on I/O, say) after it.
// Durations are Go durations (1.5ms, 200us, 0). The header line is
// optional; blank lines and lines starting with # are skipped. Rows need
// not be in order of offset: they are replayed by offset, rows with the
// same offset in file order.

// Limits on a trace, so that a mistyped value gets an error instead of a
// run that never ends.
const maxTaskTime = time.Minute // work or sleep of one task

var (
	// errBadTrace is wrapped by every error about a trace's content.
	errBadTrace = errors.New("bad trace")

	traceHeader = []string{"offset", "session", "priority", "work", "sleep"}
)

// traceError is a bad row of a trace: its line, and what is wrong with it.
type traceError struct {
	Line   int
	Reason string
}

func (e *traceError) Error() string     { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }
func (e *traceError) Is(err error) bool { return err == errBadTrace }

// traceTask is one row of a trace.
type traceTask struct {
	at      time.Duration // offset
	session int           // index of the session's name, in order of first appearance
	high    bool
	work    time.Duration
	sleep   time.Duration
}

// trace is a parsed trace: its tasks in order of offset.
type trace struct {
	tasks    []traceTask
	sessions []string // names, indexed by traceTask.session
}

// parseTrace reads a trace. A bad row gives a *traceError (errors.Is
// errBadTrace) with its line number; a trace with no rows is an error
// wrapping errBadTrace too.
func parseTrace(r io.Reader) (trace, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1 // checked below, with a message that says which field is missing
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	var (
		t   trace
		ids = map[string]int{}
		bad = func(line int, format string, args ...any) error {
			return &traceError{Line: line, Reason: fmt.Sprintf(format, args...)}
		}
		first = true
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		var perr *csv.ParseError
		if errors.As(err, &perr) {
			return trace{}, bad(perr.Line, "%v", perr.Err)
		}
		if err != nil {
			return trace{}, err
		}
		line, _ := cr.FieldPos(0)
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		if first && slices.EqualFunc(rec, traceHeader, strings.EqualFold) {
			first = false
			continue
		}
		first = false
		if len(rec) != len(traceHeader) {
			return trace{}, bad(
				line,
				"%d fields; want %d: %s",
				len(rec),
				len(traceHeader),
				strings.Join(traceHeader, ","),
			)
		}
		if len(t.tasks) == maxTasks {
			return trace{}, bad(line, "more than %d tasks", maxTasks)
		}
		dur := func(field int, limit time.Duration) (time.Duration, error) {
			d, err := time.ParseDuration(rec[field])
			switch {
			case err != nil:
				return 0, bad(line, "%s %q: not a duration (like 1.5ms or 200us)", traceHeader[field], rec[field])
			case d < 0:
				return 0, bad(line, "%s %v: must not be negative", traceHeader[field], d)
			case d > limit:
				return 0, bad(line, "%s %v: must be at most %v", traceHeader[field], d, limit)
			}
			return d, nil
		}
		var task traceTask
		if task.at, err = dur(0, maxDuration); err != nil {
			return trace{}, err
		}
		name := rec[1]
		if name == "" {
			return trace{}, bad(line, "session is empty")
		}
		id, ok := ids[name]
		if !ok {
			id = len(t.sessions)
			ids[name] = id
			t.sessions = append(t.sessions, name)
		}
		task.session = id
		switch strings.ToLower(rec[2]) {
		case "high":
			task.high = true
		case "normal":
		default:
			return trace{}, bad(line, "priority %q: must be high or normal", rec[2])
		}
		if task.work, err = dur(3, maxTaskTime); err != nil {
			return trace{}, err
		}
		if task.sleep, err = dur(4, maxTaskTime); err != nil {
			return trace{}, err
		}
		t.tasks = append(t.tasks, task)
	}
	if len(t.tasks) == 0 {
		return trace{}, fmt.Errorf("no tasks: %w", errBadTrace)
	}
	slices.SortStableFunc(t.tasks, func(a, b traceTask) int { return cmp.Compare(a.at, b.at) })
	return t, nil
}
