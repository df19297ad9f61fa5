package seqkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Run consumes until ctx ends or Close is called: it fetches records and
// submits each to its key's session, pausing a partition's fetches while
// its buffer is full, and commits done offsets every commit interval. It
// returns nil once Close has stopped it, and ctx.Err() when ctx ended (the
// consumer then stays usable: call Run again or Close). A Run that begins
// after Close has begun returns ErrClosed at once, having taken nothing. A
// Run started on a goroutine may not have begun yet when a Close that
// follows at once begins, so take both nil and ErrClosed as the end that
// Close asked for. Only one Run may be in progress at a time; a second
// returns ErrRunning. Records already taken go on running after Run
// returns; Close drains them.
func (c *Consumer) Run(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	pollCtx, stop := context.WithCancel(ctx) // before the lock: it calls ctx's methods
	c.runMu.Lock()
	if c.closing.Load() {
		c.runMu.Unlock()
		stop()
		return ErrClosed
	}
	if c.running {
		c.runMu.Unlock()
		stop()
		return ErrRunning
	}
	c.running, c.stopPoll, c.runDone = true, stop, make(chan struct{})
	done := c.runDone
	c.runMu.Unlock()

	var wg sync.WaitGroup
	defer func() { // also when ctx's own methods panic
		stop()
		wg.Wait()
		c.runMu.Lock()
		c.running = false
		close(done)
		c.runMu.Unlock()
	}()
	if c.runBegun != nil {
		c.runBegun()
	}
	wg.Go(func() { c.commitLoop(pollCtx) })
	c.pollLoop(pollCtx)
	if c.closing.Load() {
		return nil
	}
	return ctx.Err()
}

// Close stops the consumer in one call: it drains, and it gives up when
// ctx ends, as the core's Scheduler.Shutdown does (and as nats.go's Drain
// with a timeout does). It stops fetching (the Run it stops returns nil; a
// Run that begins after Close has begun returns ErrClosed), waits for the
// records taken to finish, commits, leaves the group and closes the
// client, then returns nil, or a *CommitError naming the partitions whose
// final commit failed (their records done since their last commit are
// read again by their next owner), or the error of leaving the group (the
// broker unreachable: the group then waits the session timeout before it
// moves this member's partitions), joined. The final commit may wait for a
// rebalance in progress, for at most the commit timeout (see
// WithCommitTimeout); a commit that timed out is a *CommitError.
//
// A partition the group took from this member while Close ran is not a
// failure of Close: when a rebalance (other members leaving or joining at
// the same time) makes the broker refuse the final commit as coming from a
// generation that is over or ending (ILLEGAL_GENERATION,
// REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ...), the partition is lost,
// as kgo reports partitions lost on such errors, and its offsets are its
// next owner's business: that owner reads again what was done since the
// partition's last commit, as after a drain timeout. Close logs such
// partitions at Warn and returns no error for them. Nor does Close wait
// for the records of a partition that kgo reports lost while Close drains
// it (the member was evicted): they are no longer this member's, their
// handlers see their ctx canceled, and Close goes on.
//
// If ctx ends first, Close gives up, as the core's Scheduler.Close does at
// once: running handlers see their ctx canceled (those a revocation in
// progress is draining too), queued records never start, what is done is
// committed (within the commit timeout), the group is left and the client
// closed, and Close returns ctx.Err() (joined with a *CommitError if the
// commit failed). Records not done are read again by the partitions' next
// owner. Close is safe to call more than once and concurrently; later
// calls wait for the first to finish and return nil (or ctx.Err()).
//
// From one of the consumer's callbacks (a handler, a backoff or
// dead-letter function, the logger), pass the ctx the callback was given,
// or one derived from it: Close cannot wait for the callback that calls
// it, so it then starts closing on a goroutine of its own (draining for at
// most the drain timeout) and returns an error wrapping
// seqsched.ErrWouldDeadlock at once; call Close again from elsewhere to
// wait for the end. Given any other ctx there, Close would wait for its
// own caller until ctx ends.
func (c *Consumer) Close(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if c.fromCallback(ctx) {
		select {
		case <-c.closedDown:
			return nil
		default:
		}
		c.closeOnce.Do(func() {
			go func() { // owned: closedDown tells its end, and every Close waits for it
				bg, cancel := context.WithTimeout(context.Background(), c.cfg.drainTimeout)
				defer cancel()
				_ = c.closeAndSignal(bg)
			}()
		})
		return errWouldDeadlock
	}
	first := false
	var err error
	c.closeOnce.Do(func() {
		first = true
		err = c.closeAndSignal(ctx)
	})
	if first {
		return err
	}
	select {
	case <-c.closedDown:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeAndSignal closes the consumer and then closedDown, also when ctx's
// own methods panic or call runtime.Goexit (the close then gives up at
// once, and the panic goes on to Close's caller).
func (c *Consumer) closeAndSignal(ctx context.Context) (err error) {
	finished := false
	defer func() {
		if !finished {
			_ = c.close(noWait)
		}
		close(c.closedDown)
	}()
	err = c.close(ctx)
	finished = true
	return err
}

func (c *Consumer) close(ctx context.Context) error {
	c.runMu.Lock()
	c.closing.Store(true)
	stop, done := c.stopPoll, c.runDone
	c.runMu.Unlock()
	if done != nil {
		stop()
		// The poll returns once its ctx ends and any rebalance in progress
		// is over (kgo's rule): a revocation drains for up to the drain
		// timeout, then commits. Closing the client under it would leave
		// the group mid-rebalance, so Close waits for it; but once ctx
		// ends, Close gives up as below: the running handlers, a
		// revocation's included, see their ctx canceled at once, and only
		// the revocation's commit (bounded by the commit timeout) is left
		// to wait for.
		select {
		case <-done:
		case <-ctx.Done():
			c.cancelLife()
			<-done
		}
	}

	// Drain everything taken, as a revocation of every partition would,
	// with ctx as the drain's bound.
	all := make(map[string][]int32)
	for _, k := range c.assigned() {
		all[k.topic] = append(all[k.topic], k.part)
	}
	failed, lost := c.revoke(ctx, all)
	if lost != nil {
		// Not Close's failure: the group took these partitions while
		// Close ran (a rebalance, such as other members leaving at the
		// same time), so their offsets are their next owner's, as a lost
		// partition's are.
		c.log(ctx, slog.LevelWarn, "seqkafka: partitions taken by a rebalance before the final commit; their next owner replays what was done since the last commit", "err", lost)
	}
	var commitErr error
	if failed != nil {
		commitErr = failed
	}

	var err error
	if serr := c.sched.Shutdown(ctx); serr != nil {
		err = serr
	}
	if c.batches != nil {
		if berr := c.batches.Shutdown(ctx); berr != nil && err == nil {
			err = berr
		}
	}
	c.cancelLife()
	_ = c.timers.Shutdown(context.Background()) // its tasks end with their ctx
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.commitTimeout)
	defer cancel()
	var leaveErr error
	if lerr := c.cl.LeaveGroupContext(lctx); lerr != nil && err == nil && !errors.Is(lerr, context.DeadlineExceeded) {
		leaveErr = fmt.Errorf("seqkafka: leave group: %w", lerr)
	}
	closeClient(c.cl)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	var errs []error
	for _, e := range []error{err, commitErr, leaveErr} {
		if e != nil {
			errs = append(errs, e)
		}
	}
	if len(errs) == 1 {
		return errs[0] // unchanged: a ctx error stays comparable, a *CommitError stays itself
	}
	return errors.Join(errs...)
}

// closeClient closes cl, then opens kgo's rebalance gate
// (BlockRebalanceOnPoll) for good. Client.Close starts a goroutine that
// leaves the group, passing that gate first, and waits only until the
// group is left, which Close's own leave has begun already; so it may
// return before that goroutine has run. Its own last poll,
// PollFetches(nil), holds the gate when it drains something (a fetch
// telling of a group error that no Run polled, as after a fence while
// Close drains), and nothing releases it afterwards: should the goroutine
// reach the gate only then (scheduled late, on a loaded machine), it would
// wait there for ever. Nothing polls a closed client, so allowing
// rebalances then changes nothing but that: the goroutine goes on, finds
// the group left, and ends.
func closeClient(cl *kgo.Client) {
	cl.Close()
	cl.AllowRebalance()
}
