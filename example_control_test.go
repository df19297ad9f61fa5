package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqsched/seqsched"
)

// An account under review: paused, it still takes operations, and runs them
// in order once resumed.
func ExampleScheduler_Pause() {
	s, _ := seqsched.New[string]()
	defer s.Shutdown(context.Background())

	_ = s.Pause("acct-7") // under review
	balance := 100
	f, _ := seqsched.Submit(context.Background(), s, "acct-7", func(context.Context) (int, error) {
		balance -= 30
		return balance, nil
	})
	fmt.Println("paused:", s.Paused("acct-7"), "queued:", s.Stats().Queued)

	_ = s.Resume("acct-7") // review passed
	b, err := f.Await(context.Background())
	fmt.Println("balance", b, err)
	// Output:
	// paused: true queued: 1
	// balance 70 <nil>
}

// "withdraw 50, deposit 100, withdraw 150" on a balance of 20: the first
// withdrawal fails and halts the account, so nothing after it runs until an
// operator resumes it.
func ExampleHaltOnError() {
	halted := make(chan string, 1)
	s, _ := seqsched.New[string](seqsched.WithErrorHandler(func(_ context.Context, key string, err error) {
		var he *seqsched.HaltError
		if errors.As(err, &he) {
			halted <- fmt.Sprintf("%s halted: %v", he.Key, he.Err)
		}
	}))
	defer s.Shutdown(context.Background())

	balance := 20
	var fs []*seqsched.Future[int]
	for _, amount := range []int{-50, +100, -150} {
		f, _ := seqsched.Submit(context.Background(), s, "acct-7", func(context.Context) (int, error) {
			if balance+amount < 0 {
				return balance, errors.New("insufficient funds")
			}
			balance += amount
			return balance, nil
		}, seqsched.HaltOnError)
		fs = append(fs, f)
	}
	fmt.Println(<-halted)
	high, normal := s.Queued("acct-7")
	fmt.Println("waiting:", high+normal)

	_ = s.Resume("acct-7") // the operator decides the rest may run
	for _, f := range fs[1:] {
		b, err := f.Await(context.Background())
		fmt.Println("balance", b, err)
	}
	// Output:
	// acct-7 halted: insufficient funds
	// waiting: 2
	// balance 120 <nil>
	// balance 120 insufficient funds
}

// Typing indicators for a slow client: a newer one replaces the one still
// queued, so the client gets only the latest.
func ExampleReplace() {
	s, _ := seqsched.New[string]()
	defer s.Shutdown(context.Background())

	busy := make(chan struct{})
	_ = s.Post(context.Background(), "client", func(context.Context) error { <-busy; return nil }) // a slow write
	send := func(msg string) *seqsched.Future[struct{}] {
		f, _ := s.Go(context.Background(), "client", func(context.Context) error {
			fmt.Println("sent:", msg)
			return nil
		}, seqsched.Replace("typing"))
		return f
	}
	first := send("alice is typing")
	last := send("alice stopped typing")
	_, err := first.Await(context.Background()) // resolved as last took its place
	fmt.Println("first:", err)
	close(busy)
	_, _ = last.Await(context.Background())
	// Output:
	// first: seqsched: replaced
	// sent: alice stopped typing
}

// A chat server caps each client at 20 messages a second, in bursts of
// one, without dropping any: three messages take at least 100 ms, and other
// clients are not slowed.
func ExampleWithRate() {
	s, _ := seqsched.New[string](seqsched.WithRate(func(client string) (perSecond float64, burst int) {
		return 20, 1
	}))
	defer s.Shutdown(context.Background())

	begin := time.Now()
	var last *seqsched.Future[struct{}]
	for i := range 3 {
		last, _ = s.Go(context.Background(), "chatty", func(context.Context) error {
			fmt.Println("message", i)
			return nil
		})
	}
	_, _ = last.Await(context.Background())
	fmt.Println("at least 100ms:", time.Since(begin) >= 100*time.Millisecond)
	// Output:
	// message 0
	// message 1
	// message 2
	// at least 100ms: true
}

// A caller that finds a client's queue full waits for room instead of
// failing; callers get room in the order they came.
func ExampleWaitForRoom() {
	s, _ := seqsched.New[string](seqsched.WithMaxQueue(1))
	defer s.Shutdown(context.Background())

	busy := make(chan struct{})
	_ = s.Post(context.Background(), "client", func(context.Context) error { <-busy; return nil })
	_ = s.Post(context.Background(), "client", func(context.Context) error { return nil }) // the queue is full
	_, err := s.Go(context.Background(), "client", func(context.Context) error { return nil })
	fmt.Println("without WaitForRoom:", err)

	go close(busy) // the client catches up
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := s.Go(ctx, "client", func(context.Context) error { return nil }, seqsched.WaitForRoom)
	fmt.Println("with WaitForRoom:", err)
	_, err = f.Await(ctx)
	fmt.Println("delivered:", err)
	// Output:
	// without WaitForRoom: seqsched: queue full
	// with WaitForRoom: <nil>
	// delivered: <nil>
}

// One interceptor logs every task, the way a tracer wraps it in a span.
func ExampleWithInterceptor() {
	s, _ := seqsched.New[string](seqsched.WithInterceptor(func(ctx context.Context, key string, next func(context.Context) error) error {
		fmt.Println("start", key)
		err := next(ctx)
		fmt.Println("end", key, err)
		return err
	}))
	defer s.Shutdown(context.Background())

	f, _ := s.Go(context.Background(), "alice", func(context.Context) error {
		fmt.Println("run")
		return nil
	})
	_, _ = f.Await(context.Background())
	// Output:
	// start alice
	// run
	// end alice <nil>
}
