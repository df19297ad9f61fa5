package seqsched

import (
	"context"
	"reflect"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// How many shards a scheduler has shows only in its speed, so the rule is
// checked here.

func TestShardCountFollowsGOMAXPROCS(t *testing.T) {
	for procs, want := range map[int]int{1: 16, 2: 32, 3: 64, 4: 64, 5: 128, 8: 128, 9: 256, 16: 256, 64: 256} {
		require.Equal(t, want, shardCount(procs), "procs %d", procs)
	}
	s, err := New[int]()
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	n := shardCount(runtime.GOMAXPROCS(0))
	require.Len(t, s.shards, n)
	require.Equal(t, uint64(n-1), s.mask)
}

func TestShardsMustBeAPowerOfTwo(t *testing.T) {
	for _, n := range []int{1, 2, 4, 64} {
		s, err := New[int](WithShards(n))
		require.NoError(t, err, "shards %d", n)
		require.Len(t, s.shards, n)
		require.NoError(t, s.Shutdown(context.Background()))
	}
	for _, n := range []int{-2, 3, 6, 12} {
		_, err := New[int](WithShards(n))
		require.ErrorIs(t, err, ErrInvalidOption, "shards %d", n)
	}
}

// Key types that cannot hold a NaN or an uncomparable value skip the key
// check: it is decided once, from K, at New.
func TestKeyCheckIsDecidedFromTheKeyType(t *testing.T) {
	type plain struct {
		A int
		B string
		C [3]byte
		D *int
	}
	type withFloat struct {
		A int
		F [2]float32
	}
	type withAny struct{ X any }
	for typ, want := range map[reflect.Type]bool{
		reflect.TypeFor[int]():        false,
		reflect.TypeFor[string]():     false,
		reflect.TypeFor[plain]():      false,
		reflect.TypeFor[[0]float64](): false,
		reflect.TypeFor[*float64]():   false,
		reflect.TypeFor[float64]():    true,
		reflect.TypeFor[complex64]():  true,
		reflect.TypeFor[withFloat]():  true,
		reflect.TypeFor[any]():        true,
		reflect.TypeFor[withAny]():    true,
		reflect.TypeFor[[1]error]():   true,
	} {
		require.Equal(t, want, keyCheckNeeded(typ), "%v", typ)
	}
	s, err := New[int]()
	require.NoError(t, err)
	require.False(t, s.checkKeys)
	require.NoError(t, s.Shutdown(context.Background()))
}
