package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/seqsched/seqsched"
)

// The key model: a byte string becomes a sequence of keys of every kind an
// interface-typed K can hold (ints, strings, ±0, NaN in floats, complexes,
// structs and arrays, and values whose type is not comparable), each
// submitted with a task that records its index. An independent oracle,
// written with reflect, says which keys a map can hold. The checks:
//   - a key is accepted exactly when the oracle says so, and refused with
//     ErrInvalidKey otherwise, never with a panic;
//   - accepted keys that are == share a session: their tasks ran in
//     submission order, one at a time;
//   - after Shutdown, the scheduler holds no session that a refused key made.

func TestKeyModel(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 50
	}
	base := rand.Uint64() >> 1
	for i := range uint64(n) {
		data := seedBytes(base + i)
		if msgs := runKeyModel(data); len(msgs) > 0 {
			t.Fatalf("seed %d: %v", base+i, msgs)
		}
	}
}

func FuzzKeys(f *testing.F) {
	// One seed per key kind, then mixes.
	for kind := range byte(keyKinds) {
		f.Add([]byte{kind, 0, kind, 1, kind, 0})
	}
	for seed := range uint64(4) {
		f.Add(seedBytes(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if msgs := runKeyModel(data); len(msgs) > 0 {
			t.Fatalf("%v", msgs)
		}
	})
}

const keyKinds = 14

type keyInt int

// genKey makes a key of kind k%keyKinds with a small variant v, so that
// equal keys recur.
func genKey(k, v byte) any {
	small := int(v % 3)
	negZero := math.Copysign(0, -1)
	switch k % keyKinds {
	case 0:
		return small
	case 1:
		return fmt.Sprint("s", small)
	case 2:
		return []float64{0, negZero, math.NaN()}[small] // +0 and -0 are one key; NaN is refused
	case 3:
		return float32([]float64{1, negZero, math.NaN()}[small])
	case 4:
		return complex(float64(small), []float64{0, math.NaN(), negZero}[small])
	case 5:
		return struct{ F float64 }{[]float64{0, negZero, math.NaN()}[small]}
	case 6:
		return [2]any{small, "x"}
	case 7:
		return [2]any{small, []int{small}} // not comparable
	case 8:
		return []int{small}
	case 9:
		return map[int]int{small: small}
	case 10:
		return func() {}
	case 11:
		return struct{ A any }{[]any{small, math.NaN(), []byte{1}}[small]}
	case 12:
		return keyInt(small) // not == to the int of kind 0: another dynamic type
	default:
		return [1]any{[]any{0.5, math.NaN(), "y"}[small]}
	}
}

// mapCanHold is the oracle: whether v can be a map key and equals itself,
// written with reflect, apart from the library's own check.
func mapCanHold(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return !math.IsNaN(v.Float())
	case reflect.Complex64, reflect.Complex128:
		c := v.Complex()
		return !math.IsNaN(real(c)) && !math.IsNaN(imag(c))
	case reflect.Interface:
		return v.IsNil() || mapCanHold(v.Elem())
	case reflect.Array:
		for i := range v.Len() {
			if !mapCanHold(v.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := range v.NumField() {
			if !mapCanHold(v.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Map, reflect.Func:
		return false
	}
	return true
}

func runKeyModel(data []byte) (msgs []string) {
	fail := func(format string, args ...any) { msgs = append(msgs, fmt.Sprintf(format, args...)) }
	s, err := seqsched.New[any](seqsched.WithShards(1 << (len(data) % 3)))
	if err != nil {
		return []string{err.Error()}
	}
	type sub struct {
		key any
		f   *seqsched.Future[struct{}]
	}
	var (
		subs    []sub
		mu      = make(chan struct{}, 1) // guards ran
		ran     = map[any][]int{}        // by key, as a map groups them
		running = map[any]bool{}
	)
	for i := 0; i+1 < len(data) && i < 200; i += 2 {
		key := genKey(data[i], data[i+1])
		want := mapCanHold(reflect.ValueOf(&key).Elem())
		var f *seqsched.Future[struct{}]
		func() {
			defer func() {
				if r := recover(); r != nil {
					fail("Go(%#v) panicked: %v", key, r)
				}
			}()
			f, err = s.Go(context.Background(), key, func(context.Context) error {
				mu <- struct{}{}
				if running[key] {
					fail("key %#v: two tasks overlap", key)
				}
				running[key] = true
				ran[key] = append(ran[key], i)
				<-mu
				mu <- struct{}{}
				running[key] = false
				<-mu
				return nil
			})
		}()
		switch {
		case want && err != nil:
			fail("Go(%#v) = %v; want accepted", key, err)
		case !want && !errors.Is(err, seqsched.ErrInvalidKey):
			fail("Go(%#v) = %v; want ErrInvalidKey", key, err)
		case want:
			subs = append(subs, sub{key, f})
		}
		if data[i]%5 == 0 { // sometimes Remove, valid or not
			func() {
				defer func() {
					if r := recover(); r != nil {
						fail("Remove(%#v) panicked: %v", key, r)
					}
				}()
				err := s.Remove(context.Background(), key)
				if want != (err == nil) {
					fail("Remove(%#v) = %v", key, err)
				}
			}()
		}
	}
	for _, sb := range subs {
		if _, err := sb.f.Await(context.Background()); err != nil {
			fail("task of %#v: %v", sb.key, err)
		}
	}
	if err := s.Shutdown(context.Background()); err != nil {
		fail("Shutdown: %v", err)
	}
	want := map[any][]int{}
	for i := 0; i+1 < len(data) && i < 200; i += 2 {
		key := genKey(data[i], data[i+1])
		if mapCanHold(reflect.ValueOf(&key).Elem()) {
			want[key] = append(want[key], i)
		}
	}
	for key, got := range ran {
		if w, ok := want[key]; !ok {
			fail("key %#v ran but was not expected", key)
		} else if !slices.Equal(got, w) {
			fail("key %#v ran %v; want %v in order", key, got, w)
		}
	}
	if st := s.Stats(); st.Sessions > len(want) {
		fail("%d sessions for %d distinct keys", st.Sessions, len(want))
	}
	return msgs
}
