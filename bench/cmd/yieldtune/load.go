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

// job is one task of a load.
type job struct {
	at      time.Duration // when it is submitted, from the start of the run
	session int
	high    bool
	iters   int           // bench.Spin iterations: the task's CPU work
	sleep   time.Duration // time it sleeps after its work
}

// load is what one run submits: jobs in order of submission.
type load struct {
	jobs      []job
	sessions  int // sessions are 0..sessions-1
	producers int // goroutines submitting; producer p submits jobs p, p+producers, ...
}

// synthetic is the load the flags describe, its submissions spread evenly
// over d: task id goes to session id % sessions at id × d/total, and every
// highEvery-th task is High.
func synthetic(c config, iters int, d time.Duration) load {
	total := c.sessions * c.tasks
	interval := d / time.Duration(total)
	highEvery := c.highEvery()
	jobs := make([]job, total)
	for id := range jobs {
		jobs[id] = job{
			at:      time.Duration(id) * interval,
			session: id % c.sessions,
			high:    highEvery > 0 && id%highEvery == highEvery-1,
			iters:   iters,
			sleep:   c.sleep,
		}
	}
	return load{jobs: jobs, sessions: c.sessions, producers: c.producers}
}

// replay is a trace's load at its recorded pace, submitted by one producer
// so that each session's tasks arrive in the trace's order.
func replay(t trace) load {
	jobs := make([]job, len(t.tasks))
	iters := map[time.Duration]int{}
	for i, task := range t.tasks {
		n, ok := iters[task.work]
		if !ok && task.work > 0 {
			n = bench.SpinIters(task.work)
			iters[task.work] = n
		}
		jobs[i] = job{at: task.at, session: task.session, high: task.high, iters: n, sleep: task.sleep}
	}
	return load{jobs: jobs, sessions: len(t.sessions), producers: 1}
}

// runOne runs ld once with WithYieldAfter(threshold) and
// WithMaxConcurrency(maxConc). Producers submit each job at its time (an
// open-loop load: if the scheduler cannot keep up, queues grow), every task
// records its wait, and runOne returns when all have run. progress is
// called with the tasks completed so far, from the calling goroutine.
func runOne(ctx context.Context, ld load, threshold, maxConc int, progress func(done int)) (raw, error) {
	s, err := seqsched.New[int](seqsched.WithYieldAfter(threshold), seqsched.WithMaxConcurrency(maxConc))
	if err != nil {
		return raw{}, err
	}
	total := len(ld.jobs)
	r := raw{
		threshold: threshold,
		samples:   make([]sample, total),
		finished:  make([]time.Duration, ld.sessions),
		done:      make([]int, ld.sessions),
	}
	var (
		wg        sync.WaitGroup
		completed atomic.Int64
		start     = time.Now()
		y0        = s.Stats().Yields
	)
	task := func(id int, j job, submitted time.Time) func(context.Context) error {
		return func(context.Context) error {
			r.samples[id] = sample{session: j.session, high: j.high, wait: time.Since(submitted)}
			bench.Spin(j.iters)
			if j.sleep > 0 {
				time.Sleep(j.sleep)
			}
			// Tasks of one session are ordered: these writes do not race.
			r.done[j.session]++
			r.finished[j.session] = time.Since(start)
			completed.Add(1)
			wg.Done()
			return nil
		}
	}
	wg.Add(total)
	var prod sync.WaitGroup
	var submitErr atomic.Value
	for p := range ld.producers {
		prod.Add(1)
		go func() {
			defer prod.Done()
			for id := p; id < total; id += ld.producers {
				j := ld.jobs[id]
				if ahead := time.Until(start.Add(j.at)); ahead > time.Millisecond {
					time.Sleep(ahead) // pacing the open-loop load
				}
				var opts []seqsched.TaskOption
				if j.high {
					opts = append(opts, seqsched.High)
				}
				if _, err := s.Go(ctx, j.session, task(id, j, time.Now()), opts...); err != nil {
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
