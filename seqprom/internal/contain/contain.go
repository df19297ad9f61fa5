// Package contain calls user code so that whatever it does, its caller
// goes on: a return, a panic (recovered into an error with its stack) and a
// runtime.Goexit are told apart, and the last two become errors.
package contain

import (
	"fmt"
	"runtime/debug"
)

// Call runs f on a goroutine of its own and waits for it, so that a
// runtime.Goexit in f ends that goroutine rather than the caller's (the
// Prometheus registry's collect goroutine, which would leave Gather
// waiting for ever). site names the call in the error. No lock is held.
func Call[T any](site string, f func() T) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		normal, recovered := false, false
		defer func() {
			if !normal && !recovered {
				r.err = fmt.Errorf("%s called runtime.Goexit", site)
			}
			done <- r
		}()
		func() {
			defer func() {
				if !normal {
					if p := recover(); p != nil {
						recovered = true
						r.err = fmt.Errorf("%s panicked: %v\n%s", site, p, debug.Stack())
					}
				}
			}()
			r.v = f()
			normal = true
		}()
	}()
	r := <-done
	return r.v, r.err
}
