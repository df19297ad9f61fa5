package bench

import (
	"context"
	"log/slog"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/seqsched/seqsched"
)

// The Savina subset (savina_workloads.go) runs on actor systems. An actor
// here is a key: a mailbox whose messages run one at a time, in the order
// they were sent. A message is a Task, the closure that the receiving
// actor runs; a message without a payload is one closure made once and
// sent again and again (Savina's singletons, PingMessage.ONLY), one with a
// payload is a closure made per message, so every system allocates the
// same messages and the difference between them is the delivery.

// Actors is one actor system running actors 0..n-1 of New(n).
type Actors interface {
	// Send queues m on actor to and returns at once (it may block where
	// the system's mailboxes are bounded).
	Send(to int, m Task)
	// Ask queues m on actor to and waits until it has run: request and
	// reply. ctx is the caller's: the task's own ctx when an actor asks,
	// which a system may use to see that the wait is inside a task.
	Ask(ctx context.Context, to int, m Task)
	// Once makes a fresh actor id beyond the New(n) ones, delivers m to
	// it and tears it down once m has run, without waiting: Savina's
	// fjcreate. Close waits for the teardowns.
	Once(id int, m Task)
	// Close stops every actor and waits for the system's goroutines.
	Close()
}

// ActorsMaker builds a fresh system of n actors.
type ActorsMaker struct {
	Name string
	New  func(n int) Actors
}

// SavinaSystems are the systems the Savina subset compares, seqsched
// first.
func SavinaSystems() []ActorsMaker {
	return []ActorsMaker{
		{Name: "seqsched", New: NewSeqschedActors},
		{Name: "protoactor", New: NewProtoActors},
		{Name: "naive-chan", New: NewNaiveActors},
	}
}

// ---- seqsched ----

// seqActors keeps a handle per actor, as the code that owns a key would:
// Send is Session.Post, Ask is Session.Go and Future.Await. Once posts by
// key: the session is made for the task and forgotten when it goes idle,
// which is seqsched's creation and teardown (a handle's Close would wait
// for the drain, one actor at a time).
type seqActors struct {
	s  *seqsched.Scheduler[int]
	hs []*seqsched.Session[int]
}

// NewSeqschedActors returns seqsched with default options and n open
// handles.
func NewSeqschedActors(n int) Actors {
	s, err := seqsched.New[int]()
	if err != nil {
		panic(err)
	}
	a := &seqActors{s: s, hs: make([]*seqsched.Session[int], n)}
	for i := range a.hs {
		if a.hs[i], err = s.Open(i); err != nil {
			panic(err)
		}
	}
	return a
}

// Send posts with the background ctx, never the sending task's: a posted
// task whose submit ctx is done is dropped unrun.
func (a *seqActors) Send(to int, m Task) {
	if err := a.hs[to].Post(bg, m); err != nil {
		panic(err)
	}
}

func (a *seqActors) Ask(ctx context.Context, to int, m Task) {
	f, err := a.hs[to].Go(bg, m)
	if err != nil {
		panic(err)
	}
	if _, err := f.Await(ctx); err != nil {
		panic(err)
	}
}

func (a *seqActors) Once(id int, m Task) {
	if err := a.s.Post(bg, id, m); err != nil {
		panic(err)
	}
}

func (a *seqActors) Close() {
	if err := a.s.Shutdown(bg); err != nil {
		panic(err)
	}
}

// ---- protoactor ----

// protoActors spawns an actor per key with protoactor-go's default
// (unbounded) mailbox; its Receive runs the message. Ask is
// RequestFuture(...).Result(), which blocks the asking actor as Savina's
// Akka Await variant does. Once spawns, sends and poisons (a user-lane
// stop, after the message). Every actor counts its Stopped, so that Close
// waits for all teardowns.
type protoActors struct {
	sys     *actor.ActorSystem
	props   *actor.Props
	pids    []*actor.PID
	stopped sync.WaitGroup
}

// askTask is a message whose sender waits for a reply.
type askTask Task

// NewProtoActors returns asynkron/protoactor-go with n spawned actors.
func NewProtoActors(n int) Actors {
	quiet := actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	})
	a := &protoActors{sys: actor.NewActorSystem(quiet), pids: make([]*actor.PID, n)}
	a.props = actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case Task:
			_ = m(bg)
		case askTask:
			_ = m(bg)
			c.Respond(struct{}{})
		case *actor.Stopped:
			a.stopped.Done()
		}
	})
	for i := range a.pids {
		a.pids[i] = a.spawn()
	}
	return a
}

func (a *protoActors) spawn() *actor.PID {
	a.stopped.Add(1)
	return a.sys.Root.Spawn(a.props)
}

func (a *protoActors) Send(to int, m Task) { a.sys.Root.Send(a.pids[to], m) }

func (a *protoActors) Ask(_ context.Context, to int, m Task) {
	if _, err := a.sys.Root.RequestFuture(a.pids[to], askTask(m), timeoutCall).Result(); err != nil {
		panic(err)
	}
}

func (a *protoActors) Once(_ int, m Task) {
	pid := a.spawn()
	a.sys.Root.Send(pid, m)
	a.sys.Root.Poison(pid)
}

func (a *protoActors) Close() {
	for _, pid := range a.pids {
		a.sys.Root.Poison(pid)
	}
	a.stopped.Wait()
	a.sys.Shutdown()
}

// ---- naive ----

// naiveActors is a goroutine and a buffered channel (NaiveChanBuffer) per
// actor, made at New and kept until Close; Ask sends the message with a
// channel to close once it ran. Once makes a goroutine and a channel for
// the one message and closes the channel after it.
type naiveActors struct {
	chans []chan Task
	wg    sync.WaitGroup
}

// NewNaiveActors returns the goroutine-and-channel-per-actor design.
func NewNaiveActors(n int) Actors {
	a := &naiveActors{chans: make([]chan Task, n)}
	for i := range a.chans {
		a.chans[i] = make(chan Task, NaiveChanBuffer)
		a.start(a.chans[i])
	}
	return a
}

func (a *naiveActors) start(c chan Task) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for m := range c {
			_ = m(bg)
		}
	}()
}

func (a *naiveActors) Send(to int, m Task) { a.chans[to] <- m }

func (a *naiveActors) Ask(_ context.Context, to int, m Task) {
	done := make(chan struct{})
	a.chans[to] <- func(ctx context.Context) error {
		err := m(ctx)
		close(done)
		return err
	}
	<-done
}

func (a *naiveActors) Once(_ int, m Task) {
	c := make(chan Task, 1)
	c <- m
	close(c)
	a.start(c)
}

func (a *naiveActors) Close() {
	for _, c := range a.chans {
		close(c)
	}
	a.wg.Wait()
}
