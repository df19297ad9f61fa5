package bench_test

import (
	"context"
	"runtime/metrics"
	"unsafe"

	"github.com/seqsched/seqsched"
)

// The wake-up's stack. A task that posts to an idle key wakes it on the
// task's own goroutine: accept, admit, the run queue's schedule and the
// start run under the task's fn, on a goroutine the scheduler started for
// that task's session with the runtime's first stack (2 KiB). When the
// frames of the worker loop, the user's fn and the submit path together
// outgrow it, the runtime grows the stack by copying it (Go's stacks are
// contiguous), on every wake-up, and copying a deep stack costs several
// times a wake-up's own work: runtime.copystack was 61-63% of pingpong's
// profile before core v3, and 68% again after per-key control widened the
// submit path's frames (69b733c: pingpong 6x slower). The timings of
// pingpong and threadring show it, but timing is report-only under -short;
// whether a wake-up copies its stack is not a timing, so it is checked in
// every mode.
//
// wakeCopies measures it: on a fresh scheduler, n times, a task of one key
// (on a new goroutine) calls pads[pad], which pads its stack, and posts
// from there to another key's handle, idle, as a Savina actor's Send does;
// a local whose address changed across the Post says the stack was copied.
// It returns the share of wake-ups that copied their stack and the bytes
// the padding took. A few wake-ups in a hundred may copy for the runtime's
// own reasons (the allocator's slow path); a frame too deep on the path
// makes nearly all of them copy.
func wakeCopies(pad, n int) (share float64, padded uintptr) {
	s, err := seqsched.New[int]()
	if err != nil {
		panic(err)
	}
	hs := make([]*seqsched.Session[int], 2*n)
	for i := range hs {
		if hs[i], err = s.Open(i); err != nil {
			panic(err)
		}
	}
	ctx := context.Background()
	woken := make(chan struct{})
	wake := func(context.Context) error { woken <- struct{}{}; return nil }
	copies := 0
	for i := range n {
		var moved bool
		post := func() {
			if err := hs[2*i+1].Post(ctx, wake); err != nil {
				panic(err)
			}
		}
		if err := hs[2*i].Post(ctx, func(context.Context) error {
			var top byte
			padded, moved = pads[pad](uintptr(unsafe.Pointer(&top)), post)
			return nil
		}); err != nil {
			panic(err)
		}
		<-woken // the woken key's task ran: both goroutines are done with the stacks measured
		if moved {
			copies++
		}
	}
	for _, h := range hs {
		if err := h.Close(ctx); err != nil {
			panic(err)
		}
	}
	if err := s.Shutdown(ctx); err != nil {
		panic(err)
	}
	return float64(copies) / float64(n), padded
}

// padStack calls f under one frame that holds a local of type A (an
// array: its size sets the padding), and returns the bytes between top, a
// local of the caller, and a local of that frame, and whether the
// goroutine's stack was copied while f ran.
//
//go:noinline
func padStack[A any](top uintptr, f func()) (padded uintptr, moved bool) {
	var a A
	at := uintptr(unsafe.Pointer(&a))
	*(*byte)(unsafe.Pointer(&a)) = 1
	f()
	padSink += *(*byte)(unsafe.Pointer(&a))
	return top - at, uintptr(unsafe.Pointer(&a)) != at
}

// pads are padStack's sizes, in steps of 16 bytes.
var pads = []func(uintptr, func()) (uintptr, bool){
	padStack[[1]byte], padStack[[17]byte], padStack[[33]byte], padStack[[49]byte],
	padStack[[65]byte], padStack[[81]byte], padStack[[97]byte], padStack[[113]byte],
	padStack[[129]byte], padStack[[145]byte], padStack[[161]byte], padStack[[177]byte],
	padStack[[193]byte], padStack[[209]byte], padStack[[225]byte], padStack[[241]byte],
}

var padSink byte

// startingStack is the size of a new goroutine's first stack: 2 KiB,
// unless the runtime has raised it from the stacks it scanned.
func startingStack() uint64 {
	s := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// wakePad is the padding the wake-up check gives a task's fn: core v3's
// headroom, which Savina's pingpong and threadring needed (their actors'
// Send and closures), measured on amd64 with go1.26.
const wakePad = 120

// wakeLimits are the wake-up workloads' targets, seqsched / peer, at
// Savina's sizes. Under -short, whose sizes are a hundredth, the ratios to
// naive-chan stay strict and those to protoactor-go are report-only
// (protoactor-go's fixed costs then dominate its time). Core v3's medians
// here were 0.19 and 0.27 of protoactor-go's time and 2.8 and 1.5 of
// naive-chan's; with a stack copied on every wake-up (69b733c), 1.05 and
// 1.41, and 20 and 10.
var wakeLimits = map[string]map[string]float64{
	"pingpong":   {"protoactor": 0.5, "naive-chan": 6},
	"threadring": {"protoactor": 0.5, "naive-chan": 4},
}
