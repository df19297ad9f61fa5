package seqsched_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqsched/seqsched"
)

// A connection opens a handle on its session once and sends through it:
// no key lookup per message. Close drains what was accepted, then forgets.
func ExampleScheduler_Open() {
	s, err := seqsched.New[string]()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	conn, err := s.Open("conn-7")
	if err != nil {
		panic(err)
	}
	for _, msg := range []string{"hello", "how are you?", "bye"} {
		if err := conn.Post(context.Background(), func(context.Context) error {
			fmt.Println("send", msg)
			return nil
		}); err != nil {
			panic(err)
		}
	}
	if err := conn.Close(context.Background()); err != nil { // runs the three sends first
		panic(err)
	}
	err = conn.Post(context.Background(), func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, seqsched.ErrSessionClosing))
	// Output:
	// send hello
	// send how are you?
	// send bye
	// true
}

// A task with a result through a handle.
func ExampleSubmitTo() {
	s, err := seqsched.New[string]()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	acct, err := s.Open("acct-1")
	if err != nil {
		panic(err)
	}
	defer acct.Close(context.Background())

	f, err := seqsched.SubmitTo(context.Background(), acct, func(context.Context) (int, error) { return 42, nil })
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Await(context.Background()))
	// Output: 42 <nil>
}

// Posted tasks have no future: their failures go to WithErrorHandler.
func ExampleWithErrorHandler() {
	s, err := seqsched.New[string](seqsched.WithErrorHandler(func(_ context.Context, key string, err error) {
		fmt.Printf("%s: %v\n", key, err)
	}))
	if err != nil {
		panic(err)
	}
	_ = s.Post(context.Background(), "conn-1", func(context.Context) error { return errors.New("peer gone") })
	_ = s.Post(context.Background(), "conn-1", func(context.Context) error { panic("bug") })
	_ = s.Shutdown(context.Background())
	// Output:
	// conn-1: peer gone
	// conn-1: seqsched: task panicked: bug
}

// Queued tells a messaging server how far behind a client is, before its
// queue is full: the running task is not counted.
func ExampleSession_Queued() {
	s, err := seqsched.New[string]()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())
	conn, err := s.Open("slow-client")
	if err != nil {
		panic(err)
	}
	defer conn.Close(context.Background())

	started, release := make(chan struct{}), make(chan struct{})
	_ = conn.Post(context.Background(), func(context.Context) error { close(started); <-release; return nil })
	<-started
	for range 3 {
		_ = conn.Post(context.Background(), func(context.Context) error { return nil })
	}
	_ = conn.Post(context.Background(), func(context.Context) error { return nil }, seqsched.High)
	high, normal := conn.Queued()
	fmt.Println(high, normal)
	close(release)
	// Output: 1 3
}

// Kicking a client: Discard drops what it has queued instead of sending it,
// cancels the send in progress, and frees the key.
func ExampleScheduler_Discard() {
	s, err := seqsched.New[string]()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	sending := make(chan struct{})
	f, _ := s.Go(context.Background(), "conn-7", func(ctx context.Context) error {
		close(sending)
		<-ctx.Done() // a slow write, cut short by Discard
		fmt.Println("send cut short:", seqsched.Cause(ctx))
		return ctx.Err()
	})
	<-sending
	queued, _ := s.Go(context.Background(), "conn-7", func(context.Context) error {
		fmt.Println("never sent")
		return nil
	})
	if err := s.Discard(context.Background(), "conn-7"); err != nil {
		panic(err)
	}
	_, err = queued.Await(context.Background())
	fmt.Println("queued:", err)
	_, err = f.Await(context.Background())
	fmt.Println("in progress:", err)
	// Output:
	// send cut short: seqsched: discarded
	// queued: seqsched: discarded
	// in progress: context canceled
}

// Handles are counted: a client that reconnects while its old connection
// is still closing opens a second handle, and closing the old one leaves
// the new one working.
func ExampleSession_Close() {
	s, err := seqsched.New[string]()
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	old, _ := s.Open("user-42")
	reconnected, _ := s.Open("user-42")
	fmt.Println(old.Close(context.Background())) // not the last handle: returns at once
	err = old.Post(context.Background(), func(context.Context) error { return nil })
	fmt.Println(err)
	f, err := reconnected.Go(context.Background(), func(context.Context) error { return nil })
	if err != nil {
		panic(err)
	}
	_, err = f.Await(context.Background())
	fmt.Println(err)
	fmt.Println(reconnected.Close(context.Background())) // the last: drains, then forgets
	// Output:
	// <nil>
	// seqsched: session "user-42": closing
	// <nil>
	// <nil>
}

// A callback may call back into the scheduler with the ctx it was given:
// here the error handler discards the key whose post failed. The Discard
// cannot wait for the session whose goroutine runs the handler, and says so,
// having done the discarding.
func ExampleWithErrorHandler_reentry() {
	var s *seqsched.Scheduler[string]
	s, err := seqsched.New[string](seqsched.WithErrorHandler(func(ctx context.Context, key string, err error) {
		fmt.Printf("%s: %v\n", key, err)
		if errors.Is(err, seqsched.ErrDiscarded) {
			return
		}
		fmt.Println("discard:", s.Discard(ctx, key))
	}))
	if err != nil {
		panic(err)
	}
	queued := make(chan struct{}) // the second post is queued before the first fails
	_ = s.Post(context.Background(), "acct-9", func(context.Context) error { <-queued; return errors.New("overdrawn") })
	_ = s.Post(context.Background(), "acct-9", func(context.Context) error { return nil })
	close(queued)
	_ = s.Shutdown(context.Background())
	// Output:
	// acct-9: overdrawn
	// discard: seqsched: would deadlock
	// acct-9: seqsched: discarded
}
