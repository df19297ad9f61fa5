package prompg_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/seqsched/seqsched/seqprom"
	"github.com/seqsched/seqsched/seqprom/prompg"
)

// A *seqpg.Worker is what the collector reads.
var _ prompg.StatsReader = (*seqpg.Worker)(nil)

type fixed seqpg.Stats

func (f fixed) Stats() seqpg.Stats { return seqpg.Stats(f) }

// stats has each figure distinct, so that one reported under the wrong
// name shows.
var stats = seqpg.Stats{
	Leased: 8, Claimed: 1, Completed: 2, Retried: 3, DeadLettered: 4, Halted: 5, LeaseLost: 6, LeaseExpired: 13, LeaseExpiredRunning: 14, DBErrors: 7,
	Scheduler: seqsched.Stats{Sessions: 9, Running: 10, Yields: 11, Halts: 12},
}

// pgMetrics are the names of the worker's own metrics, without namespace.
var pgMetrics = []string{
	"seqsched_pg_claimed_total", "seqsched_pg_completed_total", "seqsched_pg_retried_total",
	"seqsched_pg_dead_lettered_total", "seqsched_pg_halted_total", "seqsched_pg_lease_lost_total",
	"seqsched_pg_lease_expired_total", "seqsched_pg_lease_expired_running_total", "seqsched_pg_db_errors_total",
	"seqsched_pg_leased",
}

// exposition is the text format of the worker's own metrics with the given
// values, in pgMetrics' order, each with labels.
func exposition(labels string, v ...int) string {
	var b strings.Builder
	help := []string{"Key leases taken.", "Jobs whose completion committed.", "Failed attempts that will be retried.",
		"Jobs moved to the dead-letter table seqpg_dead.", "Keys halted by WithHaltOnError.",
		"Outcomes refused because the worker's lease on the key was lost.",
		"Keys given back because their lease expired locally unrenewed between two of their jobs.",
		"Jobs whose transaction was rolled back because their lease expired locally unrenewed while their handler ran.",
		"Database errors logged and retried.",
		"Keys the worker holds a lease on now."}
	for i, name := range pgMetrics {
		typ := "counter"
		if !strings.HasSuffix(name, "_total") {
			typ = "gauge"
		}
		b.WriteString("# HELP " + name + " " + help[i] + "\n# TYPE " + name + " " + typ + "\n")
		b.WriteString(name + labels + " " + strconv.Itoa(v[i]) + "\n")
	}
	return b.String()
}

func TestEveryFigureUnderItsName(t *testing.T) {
	c, err := prompg.NewCollector(fixed(stats), seqprom.WithConstLabels(prometheus.Labels{"app": "billing"}))
	require.NoError(t, err)
	require.NoError(t, testutil.CollectAndCompare(c,
		strings.NewReader(exposition(`{app="billing"}`, 1, 2, 3, 4, 5, 6, 13, 14, 7, 8)), pgMetrics...))
	// The scheduler's figures are seqprom's metrics, from the same Stats.
	for name, want := range map[string]float64{
		"seqsched_sessions": 9, "seqsched_running": 10, "seqsched_yields_total": 11, "seqsched_halts_total": 12,
	} {
		assert.Equal(t, want, gather(t, c, name), name)
	}
}

// gather returns the value of the counter or gauge name whose labels
// include labels (name, value pairs), failing unless exactly one matches.
func gather(t *testing.T, c prometheus.Collector, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var found []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				found = append(found, m)
			}
		}
	}
	require.Len(t, found, 1, "series %s%v", name, labels)
	if found[0].GetCounter() != nil {
		return found[0].GetCounter().GetValue()
	}
	return found[0].GetGauge().GetValue()
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if have[pairs[i]] != pairs[i+1] {
			return false
		}
	}
	return true
}

func TestNamespaceAndBadOptions(t *testing.T) {
	c, err := prompg.NewCollector(fixed(stats), seqprom.WithNamespace("app"))
	require.NoError(t, err)
	assert.Equal(t, float64(2), gather(t, c, "app_seqsched_pg_completed_total"))
	assert.Equal(t, float64(9), gather(t, c, "app_seqsched_sessions"))

	_, err = prompg.NewCollector(fixed(stats), seqprom.WithNamespace("not a name"))
	require.ErrorIs(t, err, seqprom.ErrInvalidOption)
	_, err = prompg.NewCollector(nil)
	require.ErrorIs(t, err, prompg.ErrNilStats)
}

type statsFunc func() seqpg.Stats

func (f statsFunc) Stats() seqpg.Stats { return f() }

// A Stats that panics fails the scrape with the panic's value.
func TestStatsThatPanicsFailsTheScrape(t *testing.T) {
	c, err := prompg.NewCollector(statsFunc(func() seqpg.Stats { panic("broken") }))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	_, err = reg.Gather()
	require.ErrorContains(t, err, "prompg: Stats panicked: broken")
}

func TestMetricsLintClean(t *testing.T) {
	c, err := prompg.NewCollector(fixed(stats))
	require.NoError(t, err)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}
