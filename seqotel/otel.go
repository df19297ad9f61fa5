package seqotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqotel/internal/contain"
	"github.com/seqsched/seqsched/seqotel/internal/observe"
)

// ScopeName is the instrumentation scope of the histograms Produce
// reports; name the Meter given to Register with it too.
const ScopeName = "github.com/seqsched/seqsched/seqotel"

// StatsReader is what [Metrics] reads: a *seqsched.Scheduler[K] of any
// key type K, or anything else with its Stats method.
type StatsReader interface {
	Stats() seqsched.Stats
}

// ErrNilStats is returned by New when given no StatsReader.
var ErrNilStats = errors.New("seqotel: nil StatsReader")

// Metrics exports one scheduler's figures: Register puts its counters and
// gauges on a Meter, and it is the sdkmetric.Producer of its histograms.
// Safe for concurrent use.
type Metrics struct {
	stats *contain.Reader[seqsched.Stats] // the StatsReader's Stats, contained
	attrs []attribute.KeyValue            // WithAttributes's
	start time.Time
}

var _ sdkmetric.Producer = (*Metrics)(nil)

// New returns the Metrics of s. It returns [ErrNilStats] when s is nil,
// and an [*OptionError] wrapping [ErrInvalidOption] for a bad option.
func New(s StatsReader, opts ...Option) (*Metrics, error) {
	if s == nil {
		return nil, ErrNilStats
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Metrics{
		stats: contain.NewReader("seqotel: Stats", s.Stats),
		attrs: o.attrs,
		start: time.Now(),
	}, nil
}

// Label values of the priority and outcome attributes.
var (
	priorities = [...]string{"high", "normal"}
	outcomes   = [...]string{"succeeded", "failed", "panicked", "skipped", "discarded", "replaced"}
)

// with returns the attributes of a data point: WithAttributes's, then kv.
func (m *Metrics) with(kv ...attribute.KeyValue) attribute.Set {
	return observe.Attributes(m.attrs, kv...)
}

// Register creates the counters and gauges on meter, as asynchronous
// instruments, and registers one callback that reads Stats once per
// collection and observes them all. Unregister the Registration to stop.
// If Stats panics or calls runtime.Goexit, or has not returned when the
// collection's ctx ends, the callback returns the error and observes
// nothing. Register returns the meter's error if an instrument or the
// callback cannot be made.
func (m *Metrics) Register(meter metric.Meter) (metric.Registration, error) {
	in := observe.On(meter)
	tasks := in.Counter("seqsched.tasks", "{task}", "Tasks whose future resolved, by priority and by how they ended.")
	sessions := in.Gauge("seqsched.sessions", "{session}", "Sessions with queued or running work.")
	running := in.Gauge("seqsched.running", "{session}", "Sessions running a task now.")
	queued := in.Gauge("seqsched.queued", "{task}", "Tasks waiting to start.")
	yields := in.Counter("seqsched.yields", "{yield}", "Times a session gave up its turn to another.")
	slow := in.Counter("seqsched.slow_tasks", "{task}", "Tasks that ran longer than seqsched.WithSlowTask's limit.")
	paused := in.Gauge("seqsched.paused", "{session}", "Sessions paused (Pause, or a halt) with no task running.")
	paced := in.Gauge("seqsched.paced", "{session}", "Sessions waiting for a token of their seqsched.WithRate bucket.")
	halts := in.Counter("seqsched.halts", "{halt}", "Times a failed seqsched.HaltOnError task halted its session.")
	set := func(kv ...attribute.KeyValue) metric.ObserveOption { return metric.WithAttributeSet(m.with(kv...)) }
	return in.Register(func(ctx context.Context, o metric.Observer) error {
		st, err := m.stats.Read(ctx)
		if err != nil {
			return err
		}
		for i, ps := range [...]*seqsched.PriorityStats{&st.High, &st.Normal} {
			p := attribute.String("priority", priorities[i])
			oc := ps.Outcomes
			for j, n := range [...]uint64{oc.Succeeded, oc.Failed, oc.Panicked, oc.Skipped, oc.Discarded, oc.Replaced} {
				o.ObserveInt64(tasks, int64(n), set(p, attribute.String("outcome", outcomes[j])))
			}
			o.ObserveInt64(queued, int64(ps.Queued), set(p))
		}
		o.ObserveInt64(sessions, int64(st.Sessions), set())
		o.ObserveInt64(running, int64(st.Running), set())
		o.ObserveInt64(yields, int64(st.Yields), set())
		o.ObserveInt64(slow, int64(st.SlowTasks), set())
		o.ObserveInt64(paused, int64(st.Paused), set())
		o.ObserveInt64(paced, int64(st.Paced), set())
		o.ObserveInt64(halts, int64(st.Halts), set())
		return nil
	})
}

// Produce reads Stats once and returns the wait and run-time histograms,
// per priority, cumulative since New, in seconds, with the bounds of
// seqsched.HistogramBounds, under the scope [ScopeName]. It implements
// sdkmetric.Producer: pass m to the reader with sdkmetric.WithProducer.
// If Stats panics or calls runtime.Goexit, or has not returned when ctx
// ends, it returns the error.
func (m *Metrics) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	st, err := m.stats.Read(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	wait, run := observe.Cumulative(), observe.Cumulative()
	for i, ps := range [...]*seqsched.PriorityStats{&st.High, &st.Normal} {
		attrs := m.with(attribute.String("priority", priorities[i]))
		wait.DataPoints = append(wait.DataPoints, HistogramDataPoint(ps.WaitHistogram, attrs, m.start, now))
		run.DataPoints = append(run.DataPoints, HistogramDataPoint(ps.RunHistogram, attrs, m.start, now))
	}
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: ScopeName},
		Metrics: []metricdata.Metrics{
			{Name: "seqsched.task.wait", Unit: "s", Data: wait,
				Description: "Queue wait of started tasks, from submit to start (recorded with seqsched.WithWaitHistogram)."},
			{Name: "seqsched.task.run", Unit: "s", Data: run,
				Description: "Run time of tasks, from fn's start to its return (recorded with seqsched.WithRunHistogram)."},
		},
	}}, nil
}
