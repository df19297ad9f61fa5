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
// (a connection) would: a slice indexed by key, filled on first use.
type handles struct {
	s  *seqsched.Scheduler[int]
	mu sync.Mutex
	hs []atomic.Pointer[seqsched.Session[int]]
}

func (h *handles) get(key int) *seqsched.Session[int] {
	if p := h.hs[key].Load(); p != nil { // the workloads' keys are below len(hs)
		return p
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.hs[key].Load(); p != nil {
		return p
	}
	p, err := h.s.Open(key)
	if err != nil {
		panic(err)
	}
	h.hs[key].Store(p)
	return p
}

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
	i.hs = make([]atomic.Pointer[seqsched.Session[int]], 1<<17) // every key the workloads use
	return i
}

func (i *seqHandle) Go(key int, task Task, high bool) {
	h := i.get(key)
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
