package opterr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/seqsched/seqsched/internal/opterr"
)

var (
	errA = errors.New("a: invalid option")
	errB = errors.New("b: invalid option")
)

type modA struct{}

func (modA) Name() string    { return "a" }
func (modA) Sentinel() error { return errA }

type modB struct{}

func (modB) Name() string    { return "b" }
func (modB) Sentinel() error { return errB }

// Two modules' errors share the shape and stay apart: each names its
// module, wraps its own sentinel, and errors.As finds only its own type.
func TestModulesShareTheShapeAndStayApart(t *testing.T) {
	var err error = fmt.Errorf("making: %w", &opterr.Error[modA]{Option: "WithX(0)", Reason: "must be >= 1"})
	if got, want := err.Error(), "making: a: WithX(0): must be >= 1: invalid option"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if !errors.Is(err, errA) || errors.Is(err, errB) {
		t.Errorf("errors.Is(err, errA), (err, errB) = %v, %v; want true, false", errors.Is(err, errA), errors.Is(err, errB))
	}
	var a *opterr.Error[modA]
	var b *opterr.Error[modB]
	if !errors.As(err, &a) || a.Option != "WithX(0)" || a.Reason != "must be >= 1" {
		t.Errorf("errors.As(err, *Error[modA]) = %v, %+v", errors.As(err, &a), a)
	}
	if errors.As(err, &b) {
		t.Errorf("errors.As(err, *Error[modB]) = true; want false")
	}
}
