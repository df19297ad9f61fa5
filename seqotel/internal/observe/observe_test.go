package observe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/goleak"

	"github.com/seqsched/seqsched/seqotel/internal/observe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// meter fails to make the instrument named bad, and records what
// RegisterCallback was given.
type meter struct {
	noop.Meter
	bad        string
	registered []metric.Observable
}

var errBad = errors.New("bad instrument")

func (m *meter) Int64ObservableCounter(name string, opts ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	c, _ := m.Meter.Int64ObservableCounter(name, opts...)
	if name == m.bad {
		return c, errBad
	}
	return c, nil
}

func (m *meter) Int64ObservableUpDownCounter(name string, opts ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	g, _ := m.Meter.Int64ObservableUpDownCounter(name, opts...)
	if name == m.bad {
		return g, errBad
	}
	return g, nil
}

func (m *meter) RegisterCallback(f metric.Callback, instruments ...metric.Observable) (metric.Registration, error) {
	m.registered = instruments
	return m.Meter.RegisterCallback(f, instruments...)
}

func callback(context.Context, metric.Observer) error { return nil }

// Register registers the callback for every instrument made, in order.
func TestRegisterObservesEveryInstrumentMade(t *testing.T) {
	m := &meter{}
	in := observe.On(m)
	c := in.Counter("c", "{x}", "a counter")
	g := in.Gauge("g", "{x}", "a gauge")
	_, err := in.Register(callback)
	require.NoError(t, err)
	assert.Equal(t, []metric.Observable{c, g}, m.registered)
}

// An instrument the meter cannot make fails Register with the meter's
// error, and nothing is registered.
func TestRegisterReturnsTheMetersErrorAndRegistersNothing(t *testing.T) {
	for _, bad := range []string{"c", "g"} {
		m := &meter{bad: bad}
		in := observe.On(m)
		in.Counter("c", "{x}", "a counter")
		in.Gauge("g", "{x}", "a gauge")
		reg, err := in.Register(callback)
		require.ErrorIs(t, err, errBad, bad)
		assert.Nil(t, reg)
		assert.Nil(t, m.registered, "registered despite a failed instrument")
	}
}

func TestOneCountsAFlag(t *testing.T) {
	assert.Equal(t, []int64{1, 0}, []int64{observe.One(true), observe.One(false)})
}
