package seqsched

import (
	"fmt"
	"reflect"
)

// keyCheckNeeded reports whether a K can be a key that a map cannot hold:
// one not equal to itself (a NaN in a float, a complex, or an array or
// struct holding one) or an interface holding a value whose type is not
// comparable. New decides it once; for every other K the check costs a
// predictable branch.
func keyCheckNeeded(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.Interface:
		return true
	case reflect.Array:
		return t.Len() > 0 && keyCheckNeeded(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if keyCheckNeeded(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// validKey refuses a key that a map cannot hold: a map never finds a NaN
// key again (every task would make a session never forgotten), and hashing
// an interface holding a slice, map or func panics.
func (s *Scheduler[K]) validKey(key K) error {
	if !s.checkKeys {
		return nil
	}
	return checkKey(key)
}

// checkKey compares key with itself: a NaN is unequal, and an interface
// holding an uncomparable value makes the comparison panic, the runtime's
// panic and not user code, on the caller's goroutine, so it is recovered
// here and turned into a *KeyError (no worker's guard is involved).
func checkKey[K comparable](key K) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &KeyError{Key: key, Reason: fmt.Sprintf("is not comparable (%v)", r)}
		}
	}()
	if key != key {
		return &KeyError{Key: key, Reason: "is not equal to itself (it is or holds a NaN)"}
	}
	return nil
}
