package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/bench"
)

// runOne runs the load once with WithYieldAfter(threshold). Producers
// submit sessions×tasks tasks, spread evenly over the configured duration
// (an open-loop load: if the scheduler cannot keep up, queues grow), every
// task records its wait, and runOne returns when all have run. progress is
// called with the tasks completed so far, from the calling goroutine.
func runOne(ctx context.Context, c config, threshold int, iters int, progress func(done int)) (raw, error) {
	s, err := seqsched.New[int](seqsched.WithYieldAfter(threshold), seqsched.WithMaxConcurrency(c.maxConc))
	if err != nil {
		return raw{}, err
	}
	total := c.sessions * c.tasks
	r := raw{
		threshold: threshold,
		samples:   make([]sample, total),
		finished:  make([]time.Duration, c.sessions),
		done:      make([]int, c.sessions),
	}
	var (
		wg        sync.WaitGroup
		completed atomic.Int64
		start     = time.Now()
		y0        = s.Stats().Yields
	)
	highEvery := c.highEvery() // every highEvery-th task is High; 0: none
	task := func(id, session int, high bool, submitted time.Time) func(context.Context) error {
		return func(context.Context) error {
			r.samples[id] = sample{session: session, high: high, wait: time.Since(submitted)}
			bench.Spin(iters)
			if c.sleep > 0 {
				time.Sleep(c.sleep)
			}
			// Tasks of one session are ordered: these writes do not race.
			r.done[session]++
			r.finished[session] = time.Since(start)
			completed.Add(1)
			wg.Done()
			return nil
		}
	}
	wg.Add(total)
	var prod sync.WaitGroup
	var submitErr atomic.Value
	interval := c.duration / time.Duration(total)
	for p := range c.producers {
		prod.Add(1)
		go func() {
			defer prod.Done()
			for id := p; id < total; id += c.producers {
				if ahead := time.Until(start.Add(time.Duration(id) * interval)); ahead > time.Millisecond {
					time.Sleep(ahead) // pacing the open-loop load
				}
				session := id % c.sessions
				high := highEvery > 0 && id%highEvery == highEvery-1
				var opts []seqsched.TaskOption
				if high {
					opts = append(opts, seqsched.High)
				}
				if _, err := s.Go(ctx, session, task(id, session, high, time.Now()), opts...); err != nil {
					submitErr.CompareAndSwap(nil, err)
					wg.Done()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			progress(int(completed.Load()))
		}
	}
	r.elapsed = time.Since(start)
	prod.Wait()
	progress(total)
	st := s.Stats()
	r.yields = st.Yields - y0
	if err := s.Shutdown(ctx); err != nil {
		return r, err
	}
	if err, _ := submitErr.Load().(error); err != nil {
		return r, fmt.Errorf("submit: %w", err)
	}
	if st.Panics > 0 { // a bug in the load itself: its figures would be wrong
		return r, fmt.Errorf("%d tasks panicked", st.Panics)
	}
	return r, nil
}
