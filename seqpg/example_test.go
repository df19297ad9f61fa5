package seqpg_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqsched/seqsched/seqpg"
)

// DefaultBackoff doubles from 100ms up to 10s.
func ExampleDefaultBackoff() {
	for _, attempt := range []int{1, 2, 3, 7, 8, 20} {
		fmt.Println(attempt, seqpg.DefaultBackoff(context.Background(), nil, attempt, nil))
	}
	// Output:
	// 1 100ms
	// 2 200ms
	// 3 400ms
	// 7 6.4s
	// 8 10s
	// 20 10s
}

// A handler's Terminal error skips the remaining attempts; it prints as the
// error it wraps, and matches both that error and ErrTerminal.
func ExampleTerminal() {
	errNoAccount := errors.New("no such account")
	err := seqpg.Terminal(fmt.Errorf("account 7: %w", errNoAccount))
	fmt.Println(err)
	fmt.Println(errors.Is(err, seqpg.ErrTerminal), errors.Is(err, errNoAccount))
	// Output:
	// account 7: no such account
	// true true
}

// Options print as the call that made them, and a bad one is an
// *OptionError naming it.
func ExampleNewWorker_badOption() {
	_, err := seqpg.NewWorker(nil, nil)
	fmt.Println(err)
	fmt.Println(seqpg.WithLease(0), seqpg.WithMaxConcurrency(8))
	// Output:
	// seqpg: nil handler
	// WithLease(0s) WithMaxConcurrency(8)
}
