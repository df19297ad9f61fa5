// Package seqsched runs tasks in order per session, with a priority lane,
// fairly across sessions, and with no goroutine for an idle session.
//
// Servers that talk to many clients need each client's work to run one task
// at a time in the order it was submitted (a WebSocket connection's
// outbound messages, a bank account's operations), urgent work to jump the
// queue, and one chatty client never to starve the rest. A [Scheduler] keys
// tasks by session: each session has a High and a Normal FIFO, gets a
// goroutine only while it has work, and gives way to waiting sessions after
// a bounded number of tasks.
//
//	s, err := seqsched.New[string]()
//	if err != nil { ... }
//	defer s.Shutdown(context.Background())
//
//	h, _ := s.Open("alice")           // a handle: what most callers want
//	h.Post(ctx, deposit)              // fire and forget; failures to WithErrorHandler or the log
//	h.Post(ctx, freeze, seqsched.High) // runs before alice's queued work
//
//	f, _ := seqsched.SubmitTo(ctx, h, balance) // Submit when a result is awaited
//	n, err := f.Await(ctx)
//
// Per key, without touching the others: [Scheduler.Pause] and
// [Scheduler.Resume] hold and release a key; [HaltOnError] halts a key
// whose task failed until it is resumed; [Replace] lets the latest of a
// kind of task (presence, typing, a price) replace the one still queued;
// [WithRate] paces a chatty key; [WaitForRoom] waits for room in a full
// queue; and [WithInterceptor] wraps every task, for tracing or a policy.
// Each costs nothing when it is not used.
//
// Costs: one allocation per task (the task and its future together), no
// goroutine per task, no channel unless a future's Done is called (Await,
// from a task with its ctx too, allocates nothing), and no goroutine for a
// session once its queues are empty. BENCHMARKS.md in the repository has
// the measured numbers.
//
// # The contract with your code
//
// fn may panic or call runtime.Goexit: its task resolves with a
// [*PanicError] (value and stack) or [ErrGoexit], and the session goes on;
// so may a [WithInterceptor] function, which runs as part of its task. The
// same holds for the callbacks ([WithErrorHandler], the logger's handler,
// [WithWeight], [WithRate]) and for methods of values they return: a panic
// or Goexit there is logged, and nothing is lost. No user code runs under a
// lock of the scheduler. A ctx you pass is trusted to keep the
// context.Context contract, as errgroup and net/http trust it. A call that
// would wait for its own caller (a task awaiting its own session) is known
// by the ctx it is given, and returns [ErrWouldDeadlock]; see
// [WithErrorHandler] for the rules of callbacks.
//
// # Memory model
//
// Everything a task's fn does happens before its future's [Future.Await]
// returns (and before its Done channel is closed), before a
// [Scheduler.Remove] of its key or a [Scheduler.Shutdown] that returns nil
// returns, and before the next task of its key starts. So state that only
// one key's tasks touch needs no lock, and a caller that awaited a task
// may read what it wrote.
package seqsched

// For maintainers: docs/maintainers.md maps the core (the session state
// machine, live tokens, locks, files, and where each guarantee is kept).
