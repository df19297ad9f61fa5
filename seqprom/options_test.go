package seqprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqprom"
)

func TestNewCollectorRefusesNilStats(t *testing.T) {
	c, err := seqprom.NewCollector(nil)
	assert.Nil(t, c)
	require.ErrorIs(t, err, seqprom.ErrNilStats)
}

// Each bad option is named in the one error NewCollector returns.
func TestBadOptionsAreOneErrorNamingEach(t *testing.T) {
	s := newScheduler(t)
	for _, c := range []struct {
		name string
		opts []seqprom.Option
		want []string
	}{
		{"namespace", []seqprom.Option{seqprom.WithNamespace("1st")},
			[]string{`seqprom: WithNamespace("1st"): must match [a-zA-Z_][a-zA-Z0-9_]*: invalid option`}},
		{"namespace with a colon", []seqprom.Option{seqprom.WithNamespace("a:b")}, []string{`WithNamespace("a:b")`}},
		{"reserved label", []seqprom.Option{seqprom.WithConstLabels(prometheus.Labels{"priority": "x"})},
			[]string{`seqprom: WithConstLabels({"priority": "x"}): label name "priority" is one the metrics use: invalid option`}},
		{"le", []seqprom.Option{seqprom.WithConstLabels(prometheus.Labels{"le": "1"})}, []string{`label name "le"`}},
		{"double underscore", []seqprom.Option{seqprom.WithConstLabels(prometheus.Labels{"__name__": "x"})}, []string{`label name "__name__"`}},
		{"bad name", []seqprom.Option{seqprom.WithConstLabels(prometheus.Labels{"a-b": "x"})}, []string{`label name "a-b"`}},
		{"bad value", []seqprom.Option{seqprom.WithConstLabels(prometheus.Labels{"a": "\xff"})}, []string{`label "a": value must be valid UTF-8`}},
		{"twice", []seqprom.Option{seqprom.WithConstLabels(prometheus.Labels{"a": "1"}), seqprom.WithConstLabels(prometheus.Labels{"a": "2"})},
			[]string{`WithConstLabels({"a": "2"}): label "a" given twice`}},
		{"nil", []seqprom.Option{nil}, []string{"nil: must be an Option"}},
		{"two at once", []seqprom.Option{seqprom.WithNamespace("-"), nil},
			[]string{`WithNamespace("-")`, "nil: must be an Option"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			col, err := seqprom.NewCollector(s, c.opts...)
			assert.Nil(t, col)
			require.ErrorIs(t, err, seqprom.ErrInvalidOption)
			var oe *seqprom.OptionError
			require.True(t, errors.As(err, &oe), "%v is an *OptionError", err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestOptionsPrintAsWritten(t *testing.T) {
	assert.Equal(t, `WithNamespace("chat")`, seqprom.WithNamespace("chat").String())
	assert.Equal(t, `WithConstLabels({"a": "1", "b": "2"})`,
		seqprom.WithConstLabels(prometheus.Labels{"b": "2", "a": "1"}).String())
}

// Two schedulers on one registry, told apart by a const label; a second
// collector with the same labels is refused by the registry.
func TestTwoSchedulersOnOneRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for i, name := range []string{"chat", "jobs"} {
		s := newScheduler(t)
		for range i + 1 {
			f, err := s.Go(context.Background(), "k", sleep(0, nil))
			require.NoError(t, err)
			require.NoError(t, await(t, f))
		}
		c, err := seqprom.NewCollector(s, seqprom.WithConstLabels(prometheus.Labels{"scheduler": name}))
		require.NoError(t, err)
		require.NoError(t, reg.Register(c))
	}
	again, err := seqprom.NewCollector(newScheduler(t), seqprom.WithConstLabels(prometheus.Labels{"scheduler": "chat"}))
	require.NoError(t, err)
	require.Error(t, reg.Register(again))

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP seqsched_tasks_total Tasks whose future resolved, by priority and by how they ended.
# TYPE seqsched_tasks_total counter
seqsched_tasks_total{outcome="discarded",priority="high",scheduler="chat"} 0
seqsched_tasks_total{outcome="discarded",priority="high",scheduler="jobs"} 0
seqsched_tasks_total{outcome="discarded",priority="normal",scheduler="chat"} 0
seqsched_tasks_total{outcome="discarded",priority="normal",scheduler="jobs"} 0
seqsched_tasks_total{outcome="failed",priority="high",scheduler="chat"} 0
seqsched_tasks_total{outcome="failed",priority="high",scheduler="jobs"} 0
seqsched_tasks_total{outcome="failed",priority="normal",scheduler="chat"} 0
seqsched_tasks_total{outcome="failed",priority="normal",scheduler="jobs"} 0
seqsched_tasks_total{outcome="panicked",priority="high",scheduler="chat"} 0
seqsched_tasks_total{outcome="panicked",priority="high",scheduler="jobs"} 0
seqsched_tasks_total{outcome="panicked",priority="normal",scheduler="chat"} 0
seqsched_tasks_total{outcome="panicked",priority="normal",scheduler="jobs"} 0
seqsched_tasks_total{outcome="replaced",priority="high",scheduler="chat"} 0
seqsched_tasks_total{outcome="replaced",priority="high",scheduler="jobs"} 0
seqsched_tasks_total{outcome="replaced",priority="normal",scheduler="chat"} 0
seqsched_tasks_total{outcome="replaced",priority="normal",scheduler="jobs"} 0
seqsched_tasks_total{outcome="skipped",priority="high",scheduler="chat"} 0
seqsched_tasks_total{outcome="skipped",priority="high",scheduler="jobs"} 0
seqsched_tasks_total{outcome="skipped",priority="normal",scheduler="chat"} 0
seqsched_tasks_total{outcome="skipped",priority="normal",scheduler="jobs"} 0
seqsched_tasks_total{outcome="succeeded",priority="high",scheduler="chat"} 0
seqsched_tasks_total{outcome="succeeded",priority="high",scheduler="jobs"} 0
seqsched_tasks_total{outcome="succeeded",priority="normal",scheduler="chat"} 1
seqsched_tasks_total{outcome="succeeded",priority="normal",scheduler="jobs"} 2
`), "seqsched_tasks_total"))
}

// The metadata lints clean: names, units, help texts.
func TestMetricsLintClean(t *testing.T) {
	c, err := seqprom.NewCollector(newScheduler(t))
	require.NoError(t, err)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}
