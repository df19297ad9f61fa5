package bench

import (
	"sync"
	"sync/atomic"

	"github.com/seqsched/seqsched"
)

// The paths core v2 added: session handles and fire-and-forget Post.

// V2 returns the implementations that use them.
func V2() []Maker {
	return []Maker{
		{Name: "seqsched-hpost", New: NewSeqschedHandlePost, Keyed: true},
		{Name: "seqsched-hgo", New: NewSeqschedHandleGo, Keyed: true},
		{Name: "seqsched-post", New: NewSeqschedPost, Keyed: true},
	}
}

// handles keeps one open handle per key, as the code that owns a key
// (a connection) would: a table indexed by key, filled on first use.
//
// The table is made a chunk at a time, for the keys in use: it is live
// heap, which the GC marks every cycle, so it holds what an application
// holding these handles would. A flat table for every key a workload may
// use (1<<17 pointers, 1 MiB) was marked every cycle of a one-key stream,
// a cost of the harness that the floors do not pay.
type handles struct {
	s      *seqsched.Scheduler[int]
	mu     sync.Mutex
	chunks []atomic.Pointer[handleChunk] // by key / len(handleChunk)
}

// handleChunk is a chunk of the handle table: the handles of 256 keys.
type handleChunk [256]atomic.Pointer[seqsched.Session[int]]

func (h *handles) get(key int) *seqsched.Session[int] {
	n := len(handleChunk{})
	if c := h.chunks[key/n].Load(); c != nil { // the workloads' keys are below maxKeys
		if p := c[key%n].Load(); p != nil {
			return p
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chunks[key/n].Load()
	if c == nil {
		c = new(handleChunk)
		h.chunks[key/n].Store(c)
	}
	if p := c[key%n].Load(); p != nil {
		return p
	}
	p, err := h.s.Open(key)
	if err != nil {
		panic(err)
	}
	c[key%n].Store(p)
	return p
}

// maxKeys bounds the keys of every workload that uses handles.
const maxKeys = 1 << 17

type seqHandle struct {
	handles
	post bool
}

// NewSeqschedHandlePost streams with Session.Post (no future); Call is
// Session.Go and Await.
func NewSeqschedHandlePost() Impl { return newSeqHandle(true) }

// NewSeqschedHandlePostWith is NewSeqschedHandlePost on a scheduler made
// with opts (to measure what an option costs per task).
func NewSeqschedHandlePostWith(opts ...seqsched.Option) Impl { return newSeqHandle(true, opts...) }

// NewSeqschedHandleGo streams with Session.Go, a future per task left
// alone; Call is Session.Go and Await.
func NewSeqschedHandleGo() Impl { return newSeqHandle(false) }

func newSeqHandle(post bool, opts ...seqsched.Option) *seqHandle {
	s, err := seqsched.New[int](opts...)
	if err != nil {
		panic(err)
	}
	i := &seqHandle{post: post}
	i.s = s
	i.chunks = make([]atomic.Pointer[handleChunk], maxKeys/len(handleChunk{}))
	return i
}

func (i *seqHandle) Go(key int, task Task, high bool) { i.submit(i.get(key), task, high) }

// submit is Go through the handle of the task's key.
func (i *seqHandle) submit(h *seqsched.Session[int], task Task, high bool) {
	var opts []seqsched.TaskOption
	if high {
		opts = highOpt
	}
	if i.post {
		_ = h.Post(bg, task, opts...)
		return
	}
	_, _ = h.Go(bg, task, opts...)
}

var highOpt = []seqsched.TaskOption{seqsched.High}

// handleProducer is what one goroutine submits through a handle
// implementation: it keeps the handle of the key it submitted to last, as
// a server keeps a connection's handle, so that a stream to one key pays
// no lookup in the handle table, a cost of the harness's and not of the
// scheduler's. A producer that changes keys at each task (Many) looks each
// one up as Go does.
type handleProducer struct {
	i   *seqHandle
	key int
	h   *seqsched.Session[int]
}

func (p *handleProducer) Go(key int, task Task, high bool) {
	if p.h == nil || key != p.key {
		p.h, p.key = p.i.get(key), key
	}
	p.i.submit(p.h, task, high)
}

func (p *handleProducer) Flush() {}

func (i *seqHandle) Call(key int, task Task) {
	f, err := i.get(key).Go(bg, task)
	if err != nil {
		panic(err)
	}
	_, _ = f.Await(bg)
}

func (i *seqHandle) Priority() bool { return true }
func (i *seqHandle) Close()         { _ = i.s.Shutdown(bg) }

type seqPost struct{ s *seqsched.Scheduler[int] }

// NewSeqschedPost is fire and forget by key (Scheduler.Post); Call is Go
// by key and Await.
func NewSeqschedPost() Impl {
	s, err := seqsched.New[int]()
	if err != nil {
		panic(err)
	}
	return &seqPost{s}
}

func (i *seqPost) Go(key int, task Task, high bool) {
	if high {
		_ = i.s.Post(bg, key, task, seqsched.High)
		return
	}
	_ = i.s.Post(bg, key, task)
}

func (i *seqPost) Call(key int, task Task) {
	f, err := i.s.Go(bg, key, task)
	if err != nil {
		panic(err)
	}
	_, _ = f.Await(bg)
}

func (i *seqPost) Priority() bool { return true }
func (i *seqPost) Close()         { _ = i.s.Shutdown(bg) }
