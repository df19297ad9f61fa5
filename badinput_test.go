// Bad input: New refuses a bad option (out of range, nil, or a WithWeight
// or WithErrorHandler of another key type) with an *OptionError wrapping
// ErrInvalidOption, and accepts the boundaries. Submit, Go, Post and Open
// refuse a nil func (ErrNilFunc), a nil ctx (ErrNilContext), a bad task
// option (ErrInvalidOption) and a key that cannot be one (ErrInvalidKey);
// a zero or nil Scheduler or Session answers ErrNotNew. A refused task
// leaves no trace. Keys of every kind are checked in keys_test.go.

package seqsched_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  seqsched.Option
		want string
	}{
		{seqsched.WithYieldAfter(9), "seqsched: WithYieldAfter(9): must be 10..50: invalid option"},
		{seqsched.WithYieldAfter(51), "seqsched: WithYieldAfter(51): must be 10..50: invalid option"},
		{seqsched.WithMaxConcurrency(-1), "seqsched: WithMaxConcurrency(-1): must be >= 0 (0 means no limit): invalid option"},
		{seqsched.WithMaxQueue(-3), "seqsched: WithMaxQueue(-3): must be >= 0 (0 means no limit): invalid option"},
		{seqsched.WithLogger(nil), "seqsched: WithLogger(nil): must not be nil (pass slog.New(slog.DiscardHandler) to discard logs): invalid option"},
		{nil, "seqsched: option 0: must not be nil: invalid option"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s, err := seqsched.New[int](tc.opt)
			require.Nil(t, s)
			require.ErrorIs(t, err, seqsched.ErrInvalidOption)
			var oerr *seqsched.OptionError
			require.ErrorAs(t, err, &oerr)
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestNewAcceptsBoundaryOptions(t *testing.T) {
	for _, opt := range []seqsched.Option{
		seqsched.WithYieldAfter(10), seqsched.WithYieldAfter(50),
		seqsched.WithMaxConcurrency(0), seqsched.WithMaxQueue(0),
		seqsched.WithLogger(slog.Default()),
	} {
		s, err := seqsched.New[int](opt)
		require.NoError(t, err, "%v", opt)
		require.NoError(t, s.Shutdown(context.Background()))
	}
}

func TestPolicyOptionsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		opt  seqsched.Option
		want string
	}{
		{seqsched.WithYieldInterval(-time.Second), "seqsched: WithYieldInterval(-1s): must be >= 0 (0 means off): invalid option"},
		{seqsched.WithHighBurst(-1), "seqsched: WithHighBurst(-1): must be >= 0 (0 means strict High-first): invalid option"},
		{seqsched.WithSlowTask(-time.Millisecond), "seqsched: WithSlowTask(-1ms): must be >= 0 (0 means off): invalid option"},
	} {
		_, err := seqsched.New[string](tc.opt)
		require.ErrorIs(t, err, seqsched.ErrInvalidOption)
		require.EqualError(t, err, tc.want)
	}
}

func TestWeightKeyTypeMustMatchScheduler(t *testing.T) {
	_, err := seqsched.New[int](seqsched.WithWeight(func(string) int { return 1 }))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	require.EqualError(t, err, "seqsched: WithWeight(func(string) int): must take the scheduler's key type int: invalid option")
	_, err = seqsched.New[int](seqsched.WithWeight[int](nil))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
}

func TestWithErrorHandlerOfAnotherKeyTypeIsRefused(t *testing.T) {
	_, err := seqsched.New[int](seqsched.WithErrorHandler(func(context.Context, string, error) {}))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	_, err = seqsched.New[int](seqsched.WithErrorHandler[int](nil))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
}

func TestKeyedOptionsRefuseAnotherKeyTypeAndNil(t *testing.T) {
	for _, tc := range []struct {
		opt  seqsched.Option
		want string
	}{
		{seqsched.WithWeight(func(string) int { return 1 }),
			"seqsched: WithWeight(func(string) int): must take the scheduler's key type int: invalid option"},
		{seqsched.WithWeight[int](nil), "seqsched: WithWeight(nil): must not be nil: invalid option"},
		{seqsched.WithErrorHandler(func(context.Context, string, error) {}),
			"seqsched: WithErrorHandler(func(context.Context, string, error)): must take the scheduler's key type int: invalid option"},
		{seqsched.WithErrorHandler[int](nil), "seqsched: WithErrorHandler(nil): must not be nil: invalid option"},
		{seqsched.WithRate(func(string) (float64, int) { return 1, 1 }),
			"seqsched: WithRate(func(string) (float64, int)): must take the scheduler's key type int: invalid option"},
		{seqsched.WithRate[int](nil), "seqsched: WithRate(nil): must not be nil: invalid option"},
		{seqsched.WithInterceptor(func(context.Context, string, func(context.Context) error) error { return nil }),
			"seqsched: WithInterceptor(func(context.Context, string, func(context.Context) error) error): must take the scheduler's key type int: invalid option"},
		{seqsched.WithInterceptor[int](nil), "seqsched: WithInterceptor(nil): must not be nil: invalid option"},
	} {
		_, err := seqsched.New[int](tc.opt)
		require.ErrorIs(t, err, seqsched.ErrInvalidOption)
		require.EqualError(t, err, tc.want)
	}
}

func TestSubmitRejectsBadInput(t *testing.T) {
	s := newScheduler[string](t)
	_, err := seqsched.Submit[string, int](context.Background(), s, "k", nil)
	require.ErrorIs(t, err, seqsched.ErrNilFunc)
	_, err = s.Go(context.Background(), "k", nil)
	require.ErrorIs(t, err, seqsched.ErrNilFunc)
	noop := func(context.Context) error { return nil }
	//nolint:staticcheck // a nil ctx is the bad input under test
	_, err = s.Go(nil, "k", noop)
	require.ErrorIs(t, err, seqsched.ErrNilContext)
	_, err = s.Go(context.Background(), "k", noop, seqsched.Priority(7))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	require.EqualError(t, err, "seqsched: Priority(7): must be Normal or High: invalid option")
	_, err = s.Go(context.Background(), "k", noop, nil)
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)

	var zero seqsched.Scheduler[string]
	_, err = zero.Go(context.Background(), "k", noop)
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	require.ErrorIs(t, zero.Remove(context.Background(), "k"), seqsched.ErrNotNew)
	require.ErrorIs(t, zero.Shutdown(context.Background()), seqsched.ErrNotNew)
	require.Equal(t, seqsched.Stats{}, zero.Stats())
	var none *seqsched.Scheduler[string]
	_, err = none.Go(context.Background(), "k", noop)
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	require.ErrorIs(t, none.Remove(context.Background(), "k"), seqsched.ErrNotNew)
	require.ErrorIs(t, none.Shutdown(context.Background()), seqsched.ErrNotNew)
	require.ErrorIs(t, none.Post(context.Background(), "k", noop), seqsched.ErrNotNew)
	_, err = none.Open("k")
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	var oerr *seqsched.OptionError
	require.False(t, errors.As(err, &oerr), "a zero Scheduler is no bad option")
	var nilHandle *seqsched.Session[string]
	_, err = nilHandle.Go(context.Background(), noop)
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	require.ErrorIs(t, nilHandle.Post(context.Background(), noop), seqsched.ErrNotNew)
	require.ErrorIs(t, nilHandle.Close(context.Background()), seqsched.ErrNotNew)
	require.Equal(t, seqsched.Stats{}, none.Stats())
	require.Zero(t, s.Stats().Submitted, "rejected tasks must leave no trace")
}

func TestOpenRefusesBadKeysAndClosedScheduler(t *testing.T) {
	s, err := seqsched.New[float64]()
	require.NoError(t, err)
	_, err = s.Open(0 / zero())
	require.ErrorIs(t, err, seqsched.ErrInvalidKey)
	require.ErrorIs(t, s.Post(context.Background(), 0/zero(), func(context.Context) error { return nil }), seqsched.ErrInvalidKey)
	require.NoError(t, s.Shutdown(context.Background()))
	_, err = s.Open(1)
	require.ErrorIs(t, err, seqsched.ErrClosed)
}

func zero() float64 { return 0 }
