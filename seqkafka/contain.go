package seqkafka

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/seqsched/seqsched"
)

// site names a call site of user code (see the table in doc.go).
type site uint8

const (
	siteHandler site = iota
	siteBatch
	siteBackoff
	siteDeadLetter
	siteLogger
)

var siteNames = [...]string{"handler", "batch handler", "backoff", "dead-letter function", "logger"}

// goexitErrs holds each site's error for a call that called runtime.Goexit,
// made once so that recording it allocates nothing.
var goexitErrs = func() (e [len(siteNames)]error) {
	for i, n := range siteNames {
		e[i] = &goexitError{n}
	}
	return e
}()

// call is the one way the consumer calls user code: it runs f, a call at
// site s, and stores its outcome in *out: f's error, a
// *seqsched.PanicError (with the stack) when f panicked, or the site's
// error wrapping seqsched.ErrGoexit when f called runtime.Goexit. It
// tells the three apart as singleflight's doCall does: a normal return
// sets normal; a panic is what recover returns; a Goexit is neither. The
// caller holds no lock.
//
// A Goexit cannot be stopped: once call's deferred function has stored the
// outcome, the goroutine goes on unwinding, and the caller's code after
// call never runs. Each caller therefore has a deferred takeover that
// carries its work on from what *out and its own state say (job.takeOver,
// batch.finish), or runs call on a goroutine of its own (log): see doc.go.
func call(s site, out *error, f func() error) {
	normal := false
	defer func() {
		if normal {
			return
		}
		if v := recover(); v != nil {
			*out = &seqsched.PanicError{Value: v, Stack: debug.Stack()}
			return
		}
		*out = goexitErrs[s]
	}()
	*out = f()
	normal = true
}

// callCtx is the ctx of a call of user code: its parent's values and
// cancellation, plus the consumer that makes the call (so that Close can
// tell it is called from its own callback) and the attempt number.
type callCtx struct {
	context.Context
	c       *Consumer
	attempt int
}

type callKey struct{}

func (x *callCtx) Value(k any) any {
	if k == (callKey{}) {
		return x
	}
	return x.Context.Value(k)
}

// Attempt returns the attempt number (1 for the first) of the handler call
// whose ctx is ctx, or one derived from it: for a BatchHandler, that of
// every record in the batch (a batch holds first attempts; a retry is a
// batch of one). In a DeadLetterFunc it is the number of attempts made. It
// returns 0 for any other ctx.
func Attempt(ctx context.Context) int {
	if x, ok := ctx.Value(callKey{}).(*callCtx); ok {
		return x.attempt
	}
	return 0
}

// fromCallback reports whether ctx is (derived from) the ctx of one of c's
// own calls of user code.
func (c *Consumer) fromCallback(ctx context.Context) bool {
	x, ok := ctx.Value(callKey{}).(*callCtx)
	return ok && x.c == c
}

// log writes one line through the logger: call site "logger". The logger
// runs on a goroutine of its own, so that one that panics or calls
// runtime.Goexit loses its line and nothing else, whatever goroutine logs:
// a job's, Run's, the commit loop's, or the client's own in a rebalance
// callback, where a Goexit would end kgo's group management. log waits for
// it until ctx ends: a logger that blocks holds its caller only as long as
// the caller's own work may last (a record's, a revocation's drain,
// Close's ctx), then is left to return on its own, as a blocked handler is
// when Close gives up. No lock is held. Lines are rare (failures,
// rebalances), so the goroutine costs nothing that matters.
func (c *Consumer) log(ctx context.Context, level slog.Level, msg string, args ...any) {
	done := make(chan struct{})
	lctx := &callCtx{Context: ctx, c: c}
	go func() {
		defer close(done)
		var err error
		call(siteLogger, &err, func() error {
			l := c.cfg.logger
			if l == nil {
				l = slog.Default()
			}
			if l.Enabled(lctx, level) {
				l.Log(lctx, level, msg, args...)
			}
			return nil
		})
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
