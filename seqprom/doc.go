// Package seqprom exports a seqsched scheduler's figures to Prometheus: a
// [Collector] reads [seqsched.Scheduler.Stats] at each scrape and reports
// the counts as they are, so the scheduler pays nothing per task beyond
// the counting it already does.
//
//	s, err := seqsched.New[string](seqsched.WithWaitHistogram(), seqsched.WithRunHistogram())
//	...
//	c, err := seqprom.NewCollector(s)
//	...
//	prometheus.MustRegister(c)
//	http.Handle("/metrics", promhttp.Handler())
//
// The metrics, all with the prefix seqsched_ (after [WithNamespace]'s),
// in base units:
//
//	seqsched_tasks_total{priority,outcome}  counter    tasks whose future resolved
//	seqsched_task_wait_seconds{priority}    histogram  queue wait, submit to start (WithWaitHistogram)
//	seqsched_task_run_seconds{priority}     histogram  run time, fn's start to its return (WithRunHistogram)
//	seqsched_sessions                       gauge      sessions with queued or running work
//	seqsched_running                        gauge      sessions running a task now
//	seqsched_queued{priority}               gauge      tasks waiting to start
//	seqsched_yields_total                   counter    turns a session gave up to another
//	seqsched_slow_tasks_total               counter    tasks that ran past WithSlowTask's limit
//	seqsched_paused                         gauge      sessions paused (Pause, or a halt)
//	seqsched_paced                          gauge      sessions waiting for their WithRate bucket
//	seqsched_halts_total                    counter    sessions halted by a failed HaltOnError task
//
// priority is "high" or "normal"; outcome is "succeeded", "failed",
// "panicked", "skipped", "discarded" or "replaced" (see [seqsched.Outcomes]). The
// histograms' buckets are those of [seqsched.HistogramBounds], 1 µs to
// 60 s; they are reported always, and stay empty unless the scheduler
// was made with the option that records them. No metric has a per-key
// label: keys are unbounded, and a series per key would be too.
//
// Several schedulers in one process: give each collector its own
// [WithConstLabels] (e.g. scheduler="chat") and register them all on one
// registry.
//
// # Design
//
// The collector holds no state beyond its descriptors: each Collect calls
// Stats once and turns the snapshot into constant metrics. Stats takes
// each shard's lock of the scheduler once, briefly, and never waits for a
// task, so a scrape never holds up the scheduler, also during a burst or
// a Shutdown.
//
// User code: the only call into code the collector is handed is the
// StatsReader's Stats, once per Collect, on a goroutine of its own that
// Collect waits for, with no lock held (internal/contain):
//
//	site   what runs             a panic                      a runtime.Goexit
//	Stats  StatsReader.Stats,    Collect reports an invalid   the same, with an error
//	       from Collect          metric: Gather returns the   saying so; the
//	                             error, with the stack        registry's goroutine
//	                                                          goes on
//
// Stats may call anything, the scheduler included: Collect holds nothing
// while it runs, and a Stats that never returns holds up only its scrape.
package seqprom
