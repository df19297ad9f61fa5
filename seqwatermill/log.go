package seqwatermill

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/ThreeDotsLabs/watermill"
)

// guardedLogger is the user's logger as this package calls it: a record
// whose write panics is dropped, and the panic is written to
// slog.Default() instead, so that a broken logger neither crashes the
// process from one of this package's goroutines nor goes unseen. (A
// logger that calls runtime.Goexit ends the goroutine that logged; the
// subscription then ends cleanly, see subscription.run.)
type guardedLogger struct{ l watermill.LoggerAdapter }

func (g guardedLogger) Error(msg string, err error, fields watermill.LogFields) {
	defer g.recovered(msg)
	g.l.Error(msg, err, fields)
}

func (g guardedLogger) Info(msg string, fields watermill.LogFields) {
	defer g.recovered(msg)
	g.l.Info(msg, fields)
}

func (g guardedLogger) Debug(msg string, fields watermill.LogFields) {
	defer g.recovered(msg)
	g.l.Debug(msg, fields)
}

func (g guardedLogger) Trace(msg string, fields watermill.LogFields) {
	defer g.recovered(msg)
	g.l.Trace(msg, fields)
}

func (g guardedLogger) With(fields watermill.LogFields) (l watermill.LoggerAdapter) {
	l = g // if With panics: the logger without the fields
	defer g.recovered("With")
	return guardedLogger{g.l.With(fields)}
}

// recovered turns a panic of the logger into a record on slog.Default().
// The panic value is formatted with %T only: its own methods are user code.
func (g guardedLogger) recovered(msg string) {
	if r := recover(); r != nil {
		slog.Default().Error("seqwatermill: the logger panicked; its record was dropped",
			"record", msg, "panic_type", fmt.Sprintf("%T", r), "stack", string(debug.Stack()))
	}
}
