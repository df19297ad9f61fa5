package bench

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/alitto/pond/v2"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/go-pkgz/pool"
	"github.com/seqsched/seqsched"
)

// Task is the unit of work every implementation runs. Workloads build their
// tasks once and reuse them, so an implementation that needs no wrapper
// allocates nothing for the task itself.
type Task = func(context.Context) error

// Impl is one way of running tasks in order per session. Tasks given to Go
// for one key run one at a time in submission order (the floors, which have
// no keys, are only used where that holds trivially).
type Impl interface {
	// Go queues task on session key. high asks for the priority lane; an
	// implementation without one (see Priority) queues it as usual.
	Go(key int, task Task, high bool)
	// Call runs task on an idle session key and returns once it has run.
	// It is used from one goroutine at a time.
	Call(key int, task Task)
	// Priority reports whether high tasks overtake queued ones.
	Priority() bool
	// Close stops the implementation and waits for its goroutines where the
	// implementation offers a way to.
	Close()
}

// Producer is what one producing goroutine submits through. Flush waits for
// what it submitted when the implementation hands back futures to await.
type Producer interface {
	Go(key int, task Task, high bool)
	Flush()
}

// NewProducer returns a producer for impl: impl itself, unless it awaits
// futures or submits through handles.
func NewProducer(impl Impl) Producer {
	switch i := impl.(type) {
	case *seqAwait:
		return &awaitProducer{s: i.s}
	case *seqHandle:
		return &handleProducer{i: i}
	}
	return plain{impl}
}

// NewProducers returns n producers of impl, one per submitting goroutine.
func NewProducers(impl Impl, n int) []Producer {
	ps := make([]Producer, n)
	for i := range ps {
		ps[i] = NewProducer(impl)
	}
	return ps
}

type plain struct{ Impl }

func (plain) Flush() {}

// Maker builds a fresh implementation.
type Maker struct {
	Name string
	New  func() Impl
	// Keyed is false for the floors, which ignore keys.
	Keyed bool
}

// Keyed returns the implementations that order tasks per key, seqsched
// first.
func Keyed() []Maker {
	return []Maker{
		{Name: "seqsched", New: NewSeqsched, Keyed: true},
		{Name: "seqsched-await", New: NewSeqschedAwait, Keyed: true},
		{Name: "naive-chan", New: NewNaiveChan, Keyed: true},
		{Name: "naive-mutexmap", New: NewNaiveMutexMap, Keyed: true},
		{Name: "pond", New: NewPond, Keyed: true},
		{Name: "protoactor", New: NewProtoactor, Keyed: true},
		{Name: "pkgz-pool", New: NewPkgzPool, Keyed: true},
	}
}

var bg = context.Background()

// ---- seqsched ----

type seqImpl struct {
	s    *seqsched.Scheduler[int]
	done sync.WaitGroup
	cur  Task
	call Task
}

// NewSeqsched returns seqsched with default options. Go does not await the
// futures; Call signals completion from inside the task, without a future.
func NewSeqsched() Impl {
	s, err := seqsched.New[int]()
	if err != nil {
		panic(err)
	}
	i := &seqImpl{s: s}
	i.call = func(ctx context.Context) error {
		err := i.cur(ctx)
		i.done.Done()
		return err
	}
	return i
}

func (i *seqImpl) Go(key int, task Task, high bool) {
	if high {
		_, _ = i.s.Go(bg, key, task, seqsched.High)
		return
	}
	_, _ = i.s.Go(bg, key, task)
}

func (i *seqImpl) Call(key int, task Task) {
	i.cur = task
	i.done.Add(1)
	_, _ = i.s.Go(bg, key, i.call)
	i.done.Wait()
}

func (i *seqImpl) Priority() bool { return true }
func (i *seqImpl) Close()         { _ = i.s.Shutdown(bg) }

// seqAwait is seqsched with every future awaited: producers keep the
// futures they made and await them at Flush; Call awaits its future.
type seqAwait struct{ seqImpl }

// NewSeqschedAwait returns seqsched used through its futures.
func NewSeqschedAwait() Impl {
	s, err := seqsched.New[int]()
	if err != nil {
		panic(err)
	}
	return &seqAwait{seqImpl{s: s}}
}

func (i *seqAwait) Call(key int, task Task) {
	f, err := i.s.Go(bg, key, task)
	if err != nil {
		panic(err)
	}
	_, _ = f.Await(bg)
}

type awaitProducer struct {
	s  *seqsched.Scheduler[int]
	fs []*seqsched.Future[struct{}]
}

func (p *awaitProducer) Go(key int, task Task, high bool) {
	var f *seqsched.Future[struct{}]
	if high {
		f, _ = p.s.Go(bg, key, task, seqsched.High)
	} else {
		f, _ = p.s.Go(bg, key, task)
	}
	p.fs = append(p.fs, f)
}

func (p *awaitProducer) Flush() {
	for _, f := range p.fs {
		_, _ = f.Await(bg)
	}
	clear(p.fs)
	p.fs = p.fs[:0]
}

// ---- floors ----

// FloorChan is the cheapest pipelined hand-off: one buffered channel read by
// one consumer goroutine. It has one session; keys are ignored.
type FloorChan struct {
	ch   chan Task
	wg   sync.WaitGroup
	done sync.WaitGroup
}

// NewFloorChan starts the consumer.
func NewFloorChan() Impl {
	f := &FloorChan{ch: make(chan Task, 1024)}
	f.wg.Add(1)
	go f.loop()
	return f
}

func (f *FloorChan) loop() {
	defer f.wg.Done()
	for t := range f.ch {
		_ = t(bg)
	}
}

// Go hands task to the consumer.
func (f *FloorChan) Go(_ int, task Task, _ bool) { f.ch <- task }

// Call hands task over and waits for it.
func (f *FloorChan) Call(_ int, task Task) {
	f.done.Add(1)
	f.ch <- func(ctx context.Context) error { err := task(ctx); f.done.Done(); return err }
	f.done.Wait()
}

// Priority is false: one FIFO.
func (f *FloorChan) Priority() bool { return false }

// Close stops the consumer.
func (f *FloorChan) Close() { close(f.ch); f.wg.Wait() }

// FloorChanAlloc is the floor for one allocation per task: FloorChan
// carrying a pointer to a freshly allocated 128-byte node per task (the
// size of a seqsched task) instead of the task itself. It is what a design
// that must allocate per task (a ctx that stays done after its task, a
// closure capturing a message) can hope for at best. Keys are ignored.
type FloorChanAlloc struct {
	ch   chan *floorNode
	wg   sync.WaitGroup
	done sync.WaitGroup
}

// floorNode is 128 bytes: the task and padding to seqsched's task size.
type floorNode struct {
	task Task
	_    [120]byte
}

// floorNode is exactly 128 bytes (either array length is negative otherwise).
var (
	_ [unsafe.Sizeof(floorNode{}) - 128]struct{}
	_ [128 - unsafe.Sizeof(floorNode{})]struct{}
)

// NewFloorChanAlloc starts the consumer.
func NewFloorChanAlloc() Impl {
	f := &FloorChanAlloc{ch: make(chan *floorNode, 1024)}
	f.wg.Add(1)
	go f.loop()
	return f
}

func (f *FloorChanAlloc) loop() {
	defer f.wg.Done()
	for n := range f.ch {
		_ = n.task(bg)
	}
}

// Go allocates a node for task and hands it to the consumer.
func (f *FloorChanAlloc) Go(_ int, task Task, _ bool) { f.ch <- &floorNode{task: task} }

// Call hands task over in a node and waits for it.
func (f *FloorChanAlloc) Call(_ int, task Task) {
	f.done.Add(1)
	f.ch <- &floorNode{task: func(ctx context.Context) error { err := task(ctx); f.done.Done(); return err }}
	f.done.Wait()
}

// Priority is false: one FIFO.
func (f *FloorChanAlloc) Priority() bool { return false }

// Close stops the consumer.
func (f *FloorChanAlloc) Close() { close(f.ch); f.wg.Wait() }

// FloorGoroutine is the cheapest round trip: a goroutine spawned per task
// and a WaitGroup. It does not order anything; it is a floor only.
type FloorGoroutine struct{ wg sync.WaitGroup }

// NewFloorGoroutine returns the goroutine floor.
func NewFloorGoroutine() Impl { return &FloorGoroutine{} }

func (f *FloorGoroutine) run(task Task) {
	_ = task(bg)
	f.wg.Done()
}

// Go spawns a goroutine for task.
func (f *FloorGoroutine) Go(_ int, task Task, _ bool) {
	f.wg.Add(1)
	go f.run(task)
}

// Call spawns a goroutine for task and waits for it.
func (f *FloorGoroutine) Call(_ int, task Task) {
	f.wg.Add(1)
	go f.run(task)
	f.wg.Wait()
}

// Priority is false.
func (f *FloorGoroutine) Priority() bool { return false }

// Close waits for spawned goroutines.
func (f *FloorGoroutine) Close() { f.wg.Wait() }

// FloorGoroutineAlloc is the one-allocation round-trip floor:
// FloorGoroutine with its one allocation, the spawned goroutine's closure,
// grown from 24 bytes to 128 (a seqsched future's size). Next to
// FloorGoroutine it tells what a larger allocation costs (its zeroing, its
// size class, the GC's marking) from what the scheduler's own steps cost.
type FloorGoroutineAlloc struct{ wg sync.WaitGroup }

// rtNode is what the floor's closure captures by value besides the floor:
// the task and padding, so that the closure (code pointer, floor, rtNode)
// is 128 bytes, allocated once per round trip.
type rtNode struct {
	task Task
	_    [104]byte
}

// rtNode is exactly 112 bytes (either array length is negative otherwise).
var (
	_ [unsafe.Sizeof(rtNode{}) - 112]struct{}
	_ [112 - unsafe.Sizeof(rtNode{})]struct{}
)

// NewFloorGoroutineAlloc returns the one-allocation round-trip floor.
func NewFloorGoroutineAlloc() Impl { return &FloorGoroutineAlloc{} }

func (f *FloorGoroutineAlloc) spawn(task Task) {
	f.wg.Add(1)
	n := rtNode{task: task}
	go func() {
		_ = n.task(bg)
		f.wg.Done()
	}()
}

// Go spawns a goroutine for task.
func (f *FloorGoroutineAlloc) Go(_ int, task Task, _ bool) { f.spawn(task) }

// Call spawns a goroutine for task and waits for it.
func (f *FloorGoroutineAlloc) Call(_ int, task Task) {
	f.spawn(task)
	f.wg.Wait()
}

// Priority is false.
func (f *FloorGoroutineAlloc) Priority() bool { return false }

// Close waits for spawned goroutines.
func (f *FloorGoroutineAlloc) Close() { f.wg.Wait() }

// FloorGosched is the Gosched trap, kept to show that the round trip under
// CPU load (BenchmarkRoundTripCPULoad, TestTargets) catches it:
// FloorGoroutine whose Call waits by spinning on runtime.Gosched instead
// of blocking. It is as fast as FloorGoroutine on idle Ps; whenever a
// CPU-bound goroutine shares the P, the waiter's Gosched hands the P to it
// until the runtime preempts it (about 10 ms). Issue 47's rejected fast
// path (Await spinning with Gosched) behaves the same way.
type FloorGosched struct{ wg sync.WaitGroup }

// NewFloorGosched returns the spinning variant of the goroutine floor.
func NewFloorGosched() Impl { return &FloorGosched{} }

// Go spawns a goroutine for task.
func (f *FloorGosched) Go(_ int, task Task, _ bool) {
	f.wg.Add(1)
	go func() {
		_ = task(bg)
		f.wg.Done()
	}()
}

// Call spawns a goroutine for task and spins with runtime.Gosched until it
// has run.
func (f *FloorGosched) Call(_ int, task Task) {
	var done atomic.Bool
	go func() {
		_ = task(bg)
		done.Store(true)
	}()
	for !done.Load() {
		runtime.Gosched()
	}
}

// Priority is false.
func (f *FloorGosched) Priority() bool { return false }

// Close waits for spawned goroutines.
func (f *FloorGosched) Close() { f.wg.Wait() }

// ---- naive ----

// naiveChan is what most Go code does first: a goroutine and a buffered
// channel per session, created on first use and kept forever, found through
// a sync.Map. No priority lane.
type naiveChan struct {
	chans sync.Map // int -> chan Task
	mu    sync.Mutex
	wg    sync.WaitGroup
	done  sync.WaitGroup
	cur   Task
	call  Task
}

// NaiveChanBuffer is the channel capacity of each naive session.
const NaiveChanBuffer = 256

// NewNaiveChan returns the goroutine-and-channel-per-session design.
func NewNaiveChan() Impl {
	n := &naiveChan{}
	n.call = func(ctx context.Context) error {
		err := n.cur(ctx)
		n.done.Done()
		return err
	}
	return n
}

func (n *naiveChan) ch(key int) chan Task {
	if c, ok := n.chans.Load(key); ok {
		return c.(chan Task)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.chans.Load(key); ok {
		return c.(chan Task)
	}
	c := make(chan Task, NaiveChanBuffer)
	n.chans.Store(key, c)
	n.wg.Add(1)
	go n.loop(c)
	return c
}

func (n *naiveChan) loop(c chan Task) {
	defer n.wg.Done()
	for t := range c {
		_ = t(bg)
	}
}

func (n *naiveChan) Go(key int, task Task, _ bool) { n.ch(key) <- task }

func (n *naiveChan) Call(key int, task Task) {
	n.cur = task
	n.done.Add(1)
	n.ch(key) <- n.call
	n.done.Wait()
}

func (n *naiveChan) Priority() bool { return false }

func (n *naiveChan) Close() {
	n.chans.Range(func(_, c any) bool { close(c.(chan Task)); return true })
	n.wg.Wait()
}

// naiveMutexMap is the obvious hand-written keyed executor: one mutex, a map
// of per-session queues (High and Normal slices), and a goroutine started
// when a session gets work and ended when it drains. No sharding, pooling
// or fairness.
type naiveMutexMap struct {
	mu       sync.Mutex
	sessions map[int]*mmSession
	wg       sync.WaitGroup
	done     sync.WaitGroup
	cur      Task
	call     Task
}

type mmSession struct {
	high, normal []Task
}

// NewNaiveMutexMap returns the mutex+map design.
func NewNaiveMutexMap() Impl {
	n := &naiveMutexMap{sessions: make(map[int]*mmSession)}
	n.call = func(ctx context.Context) error {
		err := n.cur(ctx)
		n.done.Done()
		return err
	}
	return n
}

func (n *naiveMutexMap) Go(key int, task Task, high bool) {
	n.mu.Lock()
	s := n.sessions[key]
	start := s == nil
	if start {
		s = &mmSession{}
		n.sessions[key] = s
	}
	if high {
		s.high = append(s.high, task)
	} else {
		s.normal = append(s.normal, task)
	}
	n.mu.Unlock()
	if start {
		n.wg.Add(1)
		go n.run(key, s)
	}
}

func (n *naiveMutexMap) run(key int, s *mmSession) {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		var t Task
		switch {
		case len(s.high) > 0:
			t, s.high[0] = s.high[0], nil
			s.high = s.high[1:]
		case len(s.normal) > 0:
			t, s.normal[0] = s.normal[0], nil
			s.normal = s.normal[1:]
		default:
			delete(n.sessions, key)
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		_ = t(bg)
	}
}

func (n *naiveMutexMap) Call(key int, task Task) {
	n.cur = task
	n.done.Add(1)
	n.Go(key, n.call, false)
	n.done.Wait()
}

func (n *naiveMutexMap) Priority() bool { return true }
func (n *naiveMutexMap) Close()         { n.wg.Wait() }

// ---- pond ----

// pondImpl follows pond's docs for per-key ordering: a subpool of
// concurrency 1 per session, under one unbounded parent pool. Subpools
// cannot be forgotten safely while tasks may come, so they are kept.
type pondImpl struct {
	pool pond.Pool
	mu   sync.Mutex
	subs map[int]pond.Pool
}

// NewPond returns alitto/pond/v2 with a size-1 subpool per session.
func NewPond() Impl {
	return &pondImpl{pool: pond.NewPool(0), subs: make(map[int]pond.Pool)}
}

func (p *pondImpl) sub(key int) pond.Pool {
	p.mu.Lock()
	sp := p.subs[key]
	if sp == nil {
		sp = p.pool.NewSubpool(1)
		p.subs[key] = sp
	}
	p.mu.Unlock()
	return sp
}

func (p *pondImpl) Go(key int, task Task, _ bool) {
	_ = p.sub(key).Go(func() { _ = task(bg) })
}

func (p *pondImpl) Call(key int, task Task) {
	_ = p.sub(key).Submit(func() { _ = task(bg) }).Wait()
}

func (p *pondImpl) Priority() bool { return false }

func (p *pondImpl) Close() {
	p.mu.Lock()
	for _, sp := range p.subs {
		sp.StopAndWait()
	}
	p.mu.Unlock()
	p.pool.StopAndWait()
}

// ---- protoactor ----

// protoImpl follows protoactor-go's docs: one actor per session, spawned on
// first use and kept (actors live until stopped), with the unbounded
// priority mailbox so that High messages overtake queued ones.
type protoImpl struct {
	sys   *actor.ActorSystem
	props *actor.Props
	mu    sync.Mutex
	pids  map[int]*actor.PID
}

// highTask is a task sent with protoactor's top priority.
type highTask Task

// GetPriority implements actor.PriorityMessage.
func (highTask) GetPriority() int8 { return 7 }

// callTask is a task whose sender waits for a reply.
type callTask Task

// NewProtoactor returns asynkron/protoactor-go with one actor per session.
func NewProtoactor() Impl {
	quiet := actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	})
	p := &protoImpl{sys: actor.NewActorSystem(quiet), pids: make(map[int]*actor.PID)}
	p.props = actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case Task:
			_ = m(bg)
		case highTask:
			_ = m(bg)
		case callTask:
			_ = m(bg)
			c.Respond(struct{}{})
		}
	}, actor.WithMailbox(actor.UnboundedPriority()))
	return p
}

func (p *protoImpl) pid(key int) *actor.PID {
	p.mu.Lock()
	pid := p.pids[key]
	if pid == nil {
		pid = p.sys.Root.Spawn(p.props)
		p.pids[key] = pid
	}
	p.mu.Unlock()
	return pid
}

func (p *protoImpl) Go(key int, task Task, high bool) {
	if high {
		p.sys.Root.Send(p.pid(key), highTask(task))
		return
	}
	p.sys.Root.Send(p.pid(key), task)
}

func (p *protoImpl) Call(key int, task Task) {
	_, _ = p.sys.Root.RequestFuture(p.pid(key), callTask(task), timeoutCall).Result()
}

func (p *protoImpl) Priority() bool { return true }

func (p *protoImpl) Close() {
	p.mu.Lock()
	for _, pid := range p.pids {
		_ = p.sys.Root.StopFuture(pid).Wait()
	}
	p.mu.Unlock()
	p.sys.Shutdown()
}

// timeoutCall bounds protoactor's request futures, which require a timeout.
const timeoutCall = time.Minute

// ---- go-pkgz/pool ----

// pkgzImpl uses go-pkgz/pool's keyed distribution (WithChunkFn): a fixed set
// of GOMAXPROCS workers, each key hashed to one of them, so a key's items
// run in order on its worker. Batching is off so that tasks run at once.
type pkgzImpl struct {
	wg *pool.WorkerGroup[pkgzItem]
}

type pkgzItem struct {
	key  int
	task Task
	done *sync.WaitGroup
}

// NewPkgzPool returns go-pkgz/pool in keyed mode.
func NewPkgzPool() Impl {
	w := pool.WorkerFunc[pkgzItem](func(ctx context.Context, it pkgzItem) error {
		_ = it.task(ctx)
		if it.done != nil {
			it.done.Done()
		}
		return nil
	})
	g := pool.New[pkgzItem](runtime.GOMAXPROCS(0), w).
		WithChunkFn(func(it pkgzItem) string { return strconv.Itoa(it.key) }).
		WithBatchSize(0).
		WithWorkerChanSize(NaiveChanBuffer).
		WithContinueOnError()
	if err := g.Go(bg); err != nil {
		panic(err)
	}
	return &pkgzImpl{wg: g}
}

func (p *pkgzImpl) Go(key int, task Task, _ bool) {
	p.wg.Send(pkgzItem{key: key, task: task})
}

func (p *pkgzImpl) Call(key int, task Task) {
	var done sync.WaitGroup
	done.Add(1)
	p.wg.Send(pkgzItem{key: key, task: task, done: &done})
	done.Wait()
}

func (p *pkgzImpl) Priority() bool { return false }

func (p *pkgzImpl) Close() { _ = p.wg.Close(bg) }
