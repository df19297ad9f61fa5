package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/seqsched/seqsched"
)

// Tasks of one session run one at a time, in submission order.
func Example() {
	s, err := seqsched.New[string]()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	balance := 100 // touched only by tasks of session "acct-1"
	ops := []int{-50, +100, -150}
	var futures []*seqsched.Future[int]
	for _, amount := range ops {
		f, err := seqsched.Submit(context.Background(), s, "acct-1", func(context.Context) (int, error) {
			if balance+amount < 0 {
				return balance, errors.New("insufficient funds")
			}
			balance += amount
			return balance, nil
		})
		if err != nil {
			panic(err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		b, err := f.Await(context.Background())
		fmt.Printf("%+d -> balance %d, err %v\n", ops[i], b, err)
	}
	// Output:
	// -50 -> balance 50, err <nil>
	// +100 -> balance 150, err <nil>
	// -150 -> balance 0, err <nil>
}

func ExampleSubmit() {
	s, _ := seqsched.New[int]()
	defer s.Shutdown(context.Background())

	f, err := seqsched.Submit(context.Background(), s, 42, func(ctx context.Context) (string, error) {
		return strings.ToUpper("hello"), nil
	})
	if err != nil {
		fmt.Println("not accepted:", err)
		return
	}
	v, err := f.Await(context.Background())
	fmt.Println(v, err)
	// Output: HELLO <nil>
}

// A High task runs before every queued Normal task of its session, but
// never interrupts the one that is running.
func Example_priority() {
	s, _ := seqsched.New[string]()
	defer s.Shutdown(context.Background())

	started, release := make(chan struct{}), make(chan struct{})
	s.Go(context.Background(), "conn-7", func(context.Context) error {
		close(started)
		<-release // a slow write to the client
		fmt.Println("chat message 1")
		return nil
	})
	<-started
	say := func(msg string) func(context.Context) error {
		return func(context.Context) error { fmt.Println(msg); return nil }
	}
	s.Go(context.Background(), "conn-7", say("chat message 2"))
	s.Go(context.Background(), "conn-7", say("chat message 3"))
	last, _ := s.Go(context.Background(), "conn-7", say("kick notice"), seqsched.High)
	close(release)
	last.Await(context.Background())
	s.Shutdown(context.Background())
	// Output:
	// chat message 1
	// kick notice
	// chat message 2
	// chat message 3
}

func ExampleScheduler_Go() {
	s, _ := seqsched.New[string]()
	defer s.Shutdown(context.Background())

	f, _ := s.Go(context.Background(), "job", func(context.Context) error {
		return errors.New("disk full")
	})
	_, err := f.Await(context.Background())
	fmt.Println(err)
	// Output: disk full
}

// Remove lets every accepted task run, refuses new ones meanwhile, and then
// forgets the session: a WebSocket server's disconnect path.
func ExampleScheduler_Remove() {
	s, _ := seqsched.New[string]()
	defer s.Shutdown(context.Background())

	for i := 1; i <= 3; i++ {
		s.Go(context.Background(), "conn-1", func(context.Context) error {
			fmt.Println("flush message", i)
			return nil
		})
	}
	if err := s.Remove(context.Background(), "conn-1"); err != nil {
		fmt.Println("remove:", err)
	}
	fmt.Println("sessions left:", s.Stats().Sessions)
	// Output:
	// flush message 1
	// flush message 2
	// flush message 3
	// sessions left: 0
}

// Shutdown refuses new work, runs what was accepted, and waits for the
// scheduler's goroutines.
func ExampleScheduler_Shutdown() {
	s, _ := seqsched.New[int]()
	f, _ := s.Go(context.Background(), 1, func(context.Context) error {
		fmt.Println("accepted before Shutdown: runs")
		return nil
	})
	if err := s.Shutdown(context.Background()); err != nil {
		fmt.Println("shutdown:", err)
	}
	_, err := s.Go(context.Background(), 1, func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, seqsched.ErrClosed))
	_, err = f.Await(context.Background())
	fmt.Println(err)
	// Output:
	// accepted before Shutdown: runs
	// true
	// <nil>
}

// Panics are recovered with their stack; the session goes on.
func ExamplePanicError() {
	s, _ := seqsched.New[string]()
	defer s.Shutdown(context.Background())

	f, _ := s.Go(context.Background(), "k", func(context.Context) error { panic("bad input") })
	_, err := f.Await(context.Background())
	var perr *seqsched.PanicError
	if errors.As(err, &perr) {
		fmt.Println("recovered:", perr.Value, "stack captured:", len(perr.Stack) > 0)
	}
	// Output: recovered: bad input stack captured: true
}

// Close gives up at once, where Shutdown would drain first: the running
// task's ctx is canceled and what has not started resolves with ErrClosed.
// A Shutdown after it waits for the goroutines.
func ExampleScheduler_Close() {
	s, err := seqsched.New[string]()
	if err != nil {
		panic(err)
	}
	started := make(chan struct{})
	running, _ := s.Go(context.Background(), "a", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	<-started
	queued, _ := s.Go(context.Background(), "a", func(context.Context) error { return nil })
	_ = s.Close()
	_, err = running.Await(context.Background())
	fmt.Println("running:", err)
	_, err = queued.Await(context.Background())
	fmt.Println("queued:", err)
	fmt.Println("shutdown:", s.Shutdown(context.Background()))
	// Output:
	// running: context canceled
	// queued: seqsched: scheduler closed
	// shutdown: <nil>
}
