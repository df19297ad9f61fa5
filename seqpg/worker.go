package seqpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched"
)

// Handler runs one job. tx is the job's transaction: what the handler
// writes in it commits together with the job's completion, so a job's
// effects in this database happen exactly once (River's JobCompleteTx,
// built in). Returning nil completes the job; an error rolls the job's
// writes in tx back and counts as a failed attempt (see WithRetries,
// Terminal). tx's Commit and Rollback change nothing and return an error
// wrapping ErrJobTx; its Begin makes a nested transaction (a savepoint),
// as pgx's does. tx ends when the handler returns: its methods then
// return an error wrapping ErrJobTx (Conn and LargeObjects panic), and
// what it handed out (a nested transaction, Rows, the Conn) must not be
// kept past the handler either, since the key's next jobs share its
// connection. The
// job's writes become visible to others when its group of the key's jobs
// commits (WithGroupCommit). Under WithBatchedCompletion tx is nil and a
// job's effects are at least once.
//
// ctx carries the key's lease (LeaseOf) and is canceled when the worker
// loses the lease, when Close gives up waiting, or when the job's
// transaction ends. A handler that returns after its lease expired
// locally (unrenewed) has its transaction rolled back whatever it
// returns, logged at Warn and counted in Stats.LeaseExpiredRunning: the
// job runs again under the key's next lease. A handler's calls to the worker's own Close with ctx
// return an error wrapping seqsched.ErrWouldDeadlock.
type Handler func(ctx context.Context, tx pgx.Tx, job *Job) error

// Worker runs the jobs of seqpg_jobs, per key one at a time in order,
// different keys in parallel, together with the workers of other
// processes on the same database. Create it with NewWorker, run it with
// Run, stop it with Close. Its methods are safe for concurrent use.
//
// A worker holds a key by a lease, renewed while it holds it. It takes up
// a key when one of its jobs is ready (LISTEN/NOTIFY, or polling), runs
// the key's jobs in order on a seqsched session, and gives the key up
// when it has no job ready. Inside the process, its keys run under a
// seqsched.Scheduler: at most WithMaxConcurrency at once, taking turns.
type Worker struct {
	pool    *pgxpool.Pool
	handler Handler
	cfg     config
	owner   string
	sched   *seqsched.Scheduler[string]

	wake    chan struct{} // the fetcher's doorbell; capacity 1
	closeCh chan struct{} // closed when Close begins
	forceCh chan struct{} // closed when Close's ctx ends: cancel the handlers
	done    chan struct{} // closed when Run has returned, or by Close if Run never ran

	closeOnce, forceOnce sync.Once

	mu       sync.Mutex
	state    workerState
	leases   map[string]*lease
	stopping bool // Run is stopping: take no new job

	n counters
}

type workerState int

const (
	workerNew workerState = iota
	workerRunning
	workerClosed
)

type counters struct {
	claimed, completed, retried, deadLettered, halted, leaseLost, leaseExpired, leaseExpiredRunning, errs atomic.Uint64
}

// NewWorker returns a worker that runs handler on the jobs in pool's
// database (see Migrate). It starts nothing until Run. Bad options return
// an *OptionError per option, joined; a nil handler ErrNilHandler.
func NewWorker(pool *pgxpool.Pool, handler Handler, opts ...Option) (*Worker, error) {
	if handler == nil {
		return nil, ErrNilHandler
	}
	if pool == nil {
		return nil, errors.New("seqpg: nil pool")
	}
	cfg := newConfig(opts)
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	if cfg.concurrency == 0 {
		cfg.concurrency = defaultConcurrency(pool.Config().MaxConns)
	}
	sopts := []seqsched.Option{seqsched.WithMaxConcurrency(cfg.concurrency)}
	if cfg.logger != nil {
		sopts = append(sopts, seqsched.WithLogger(cfg.logger))
	}
	sched, err := seqsched.New[string](sopts...)
	if err != nil {
		return nil, fmt.Errorf("seqpg: %w", err)
	}
	var id [6]byte
	rand.Read(id[:])
	host, _ := os.Hostname()
	return &Worker{
		pool:    pool,
		handler: handler,
		cfg:     cfg,
		owner:   fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(id[:])),
		sched:   sched,
		wake:    make(chan struct{}, 1),
		closeCh: make(chan struct{}),
		forceCh: make(chan struct{}),
		done:    make(chan struct{}),
		leases:  make(map[string]*lease),
	}, nil
}

// Run runs jobs until ctx ends or Close is called. Then it stops taking
// keys, gives back the keys it holds but has not started a job of (they
// are free for other workers at once; no job is lost), waits for the
// running jobs (up to WithDrainTimeout when ctx ended, until Close's ctx
// ends after Close), cancels those still running, and returns: nil after
// Close, else ctx.Err(). A worker runs once: Run returns ErrClosed after
// it has returned or Close has begun, ErrRunning while another Run is in
// progress. Database errors are logged and retried, and do not end Run.
func (w *Worker) Run(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	w.mu.Lock()
	switch w.state {
	case workerRunning:
		w.mu.Unlock()
		return ErrRunning
	case workerClosed:
		w.mu.Unlock()
		return ErrClosed
	}
	w.state = workerRunning
	w.mu.Unlock()
	defer close(w.done)

	var loops sync.WaitGroup
	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	w.supervise(loopCtx, &loops, "fetcher", w.fetch)
	if w.cfg.listen {
		w.supervise(loopCtx, &loops, "listener", w.listen)
	}
	var renew sync.WaitGroup
	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	w.supervise(renewCtx, &renew, "lease renewer", w.renew)

	var runErr error
	select {
	case <-ctx.Done():
		runErr = ctx.Err()
	case <-w.closeCh:
	}
	w.mu.Lock()
	w.stopping = true
	w.state = workerClosed
	w.mu.Unlock()
	stopLoops()
	loops.Wait()

	// Drain: each key's next step sees stopping and gives its key back;
	// running jobs finish, unless the drain is cut short.
	drainCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if runErr != nil {
		t := time.AfterFunc(w.cfg.drainTimeout, cancel)
		defer t.Stop()
	}
	go func() {
		select {
		case <-w.forceCh:
			cancel()
		case <-drainCtx.Done():
		}
	}()
	if err := w.sched.Shutdown(drainCtx); err != nil {
		// Forced: running handlers' ctxs are canceled; wait for them to
		// return (a ctx is trusted to be obeyed).
		w.sched.Shutdown(context.Background())
	}
	cancel()
	stopRenew()
	renew.Wait()
	w.releaseAll()
	return runErr
}

// Close stops the worker as Run describes and waits, until ctx ends, for
// Run to return; at ctx's end it cancels the running handlers and returns
// ctx.Err() (Run returns once they have). Close before Run makes Run
// return ErrClosed. Close is safe to call again and concurrently. Called
// with a handler's ctx, Close begins the close and returns an error
// wrapping seqsched.ErrWouldDeadlock without waiting.
func (w *Worker) Close(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	w.closeOnce.Do(func() {
		w.mu.Lock()
		if w.state == workerNew {
			w.state = workerClosed
			close(w.done)
		}
		w.mu.Unlock()
		close(w.closeCh)
	})
	if v, _ := ctx.Value(workerKey{}).(*Worker); v == w {
		return fmt.Errorf("seqpg: Close from the worker's own handler: %w", seqsched.ErrWouldDeadlock)
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.forceOnce.Do(func() { close(w.forceCh) })
		return ctx.Err()
	}
}

type workerKey struct{}

// closing reports whether Close has begun. A key's next step reads it as
// well as stopping, which Run sets only once it has noticed the close:
// a job whose step begins after Close was called does not start.
func (w *Worker) closing() bool {
	select {
	case <-w.closeCh:
		return true
	default:
		return false
	}
}

// poke rings the fetcher's doorbell.
func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// log writes a record to the worker's logger. A logger whose handler
// panics or calls runtime.Goexit loses the record, not the worker: the
// call runs on a goroutine of its own, which the worker waits for.
func (w *Worker) log(level slog.Level, msg string, args ...any) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recover() }()
		w.cfg.log().Log(context.Background(), level, msg, args...)
	}()
	<-done
}

// supervise runs loop on a goroutine counted by wg until ctx ends; if
// loop ends otherwise (a panic or runtime.Goexit in something it called),
// it is logged and loop runs again after the poll interval, on a new
// goroutine.
func (w *Worker) supervise(ctx context.Context, wg *sync.WaitGroup, name string, loop func(context.Context)) {
	wg.Go(func() {
		returned := false
		defer func() {
			if returned || ctx.Err() != nil {
				return
			}
			r := recover()
			w.log(slog.LevelError, "seqpg: "+name+" stopped unexpectedly; restarting", "panic", r)
			w.supervise(ctx, wg, name, func(ctx context.Context) {
				select {
				case <-ctx.Done():
					return
				case <-time.After(w.cfg.pollInterval):
				}
				loop(ctx)
			})
		}()
		loop(ctx)
		returned = true
	})
}
