// Package seqotel exports a seqsched scheduler's figures to OpenTelemetry,
// and traces its tasks ([NewTracing]: a span per task, as an interceptor
// for seqsched.WithInterceptor). The figures:
// counters and gauges as asynchronous instruments on a [metric.Meter],
// read from [seqsched.Scheduler.Stats] once per collection, and the wait
// and run-time histograms as a [sdkmetric.Producer] that reports the
// scheduler's bucket counts as they are. Nothing is observed per task: the
// scheduler counts, and a collection reads the counts.
//
// Its name does not collide with go.opentelemetry.io/otel's, so neither
// needs an alias (OpenTelemetry's contrib names its wrappers so: otelhttp).
//
//	m, err := seqotel.New(s) // s: a *seqsched.Scheduler[K], any K
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(m))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	reg, err := m.Register(provider.Meter(seqotel.ScopeName))
//	defer reg.Unregister()
//
// Why a Producer for the histograms: OpenTelemetry's metric API has no
// asynchronous histogram instrument, and recording each task's duration
// again through a synchronous one would put a metrics call on the
// scheduler's hot path. A Producer hands the SDK's reader histogram data
// points made from the scheduler's counts; they bypass the SDK's views and
// are cumulative whatever temporality the reader prefers.
//
// The instruments (names follow the OpenTelemetry rules: dotted, units
// as UCUM, no unit or _total in the name); the last column is the name
// OpenTelemetry's Prometheus exporter gives each, the one package seqprom
// uses:
//
//	seqsched.tasks       counter                 {task}     priority, outcome  seqsched_tasks_total
//	seqsched.task.wait   histogram (Producer)    s          priority           seqsched_task_wait_seconds
//	seqsched.task.run    histogram (Producer)    s          priority           seqsched_task_run_seconds
//	seqsched.sessions    updowncounter           {session}                     seqsched_sessions
//	seqsched.running     updowncounter           {session}                     seqsched_running
//	seqsched.queued      updowncounter           {task}     priority           seqsched_queued
//	seqsched.yields      counter                 {yield}                       seqsched_yields_total
//	seqsched.slow_tasks  counter                 {task}                        seqsched_slow_tasks_total
//	seqsched.paused      updowncounter           {session}                     seqsched_paused
//	seqsched.paced       updowncounter           {session}                     seqsched_paced
//	seqsched.halts       counter                 {halt}                        seqsched_halts_total
//
// priority is "high" or "normal"; outcome is "succeeded", "failed",
// "panicked", "skipped", "discarded" or "replaced". The histograms' bounds are
// [seqsched.HistogramBounds] in seconds (1e-06 ... 60); they are reported
// always, and stay empty unless the scheduler was made with
// WithWaitHistogram or WithRunHistogram. Their start time is New's. No
// attribute is per key. [WithAttributes] adds attributes to every data
// point, to tell several schedulers of one process apart.
//
// User code: the only call into code this package is handed is the
// StatsReader's Stats, once per collection in the callback Register
// registers and once per Produce, each on a goroutine of its own that the
// caller waits for, with no lock held (internal/contain). A panic or
// runtime.Goexit there becomes the error that the callback or Produce
// returns (with the panic's stack); the SDK reports it and the collection
// goes on. A Stats that does not return holds the collection up until the
// collection's ctx ends (a PeriodicReader's timeout), which then gets an
// error wrapping the ctx's; while it is stuck, no other call of Stats
// starts: later collections wait for the same call, so a Stats that never
// returns leaves one goroutine behind, not one per collection.
//
// [Attributes] and [HistogramDataPoint] are what the exporters of the
// broker consumers (modules seqotel/otelkafka and seqotel/oteljetstream) share
// with this one, for an exporter of your own.
package seqotel
