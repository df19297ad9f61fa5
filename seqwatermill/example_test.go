package seqwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched/seqwatermill"
)

// A Router's handler gets the messages of each account in order, and
// those of different accounts at once.
func ExampleDecorator() {
	sub := newReleasing(4) // any watermill subscriber
	for i, acct := range []string{"alice", "bob", "alice", "bob"} {
		m := message.NewMessage(fmt.Sprint(i), []byte(fmt.Sprintf("%s #%d", acct, i/2+1)))
		m.Metadata.Set("account_id", acct)
		sub.in <- m
	}

	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddSubscriberDecorators(seqwatermill.Decorator( // the one line
		seqwatermill.WithKeyMetadata("account_id"),
	))
	got := make(chan [2]string)
	router.AddConsumerHandler("deposits", "deposits", sub, func(m *message.Message) error {
		got <- [2]string{m.Metadata.Get("account_id"), string(m.Payload)}
		return nil
	})
	done := make(chan struct{})
	go func() { defer close(done); _ = router.Run(context.Background()) }()

	byAccount := map[string][]string{}
	for range 4 {
		g := <-got
		byAccount[g[0]] = append(byAccount[g[0]], g[1])
	}
	_ = router.Close()
	<-done
	fmt.Println(byAccount["alice"])
	fmt.Println(byAccount["bob"])
	// Output:
	// [alice #1 alice #2]
	// [bob #1 bob #2]
}

// A withdrawal that fails halts its account: the account's later events
// wait, the other accounts go on, and an operator, alerted by the log,
// resumes the account once it is fixed. The failed withdrawal then runs
// first, and the deposit after it.
func ExampleWithHaltOnNack() {
	sub := newReleasing(3) // any watermill subscriber
	for i, ev := range [][2]string{{"alice", "withdraw 150"}, {"alice", "deposit 100"}, {"bob", "deposit 5"}} {
		m := message.NewMessage(fmt.Sprint(i), []byte(ev[1]))
		m.Metadata.Set("account_id", ev[0])
		sub.in <- m
	}

	var mu sync.Mutex
	balance := map[string]int{"alice": 100}
	var ctl seqwatermill.Controller
	alerts := alerting{make(chan struct{}, 1)}
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddSubscriberDecorators(seqwatermill.Decorator(
		seqwatermill.WithKeyMetadata("account_id"),
		seqwatermill.WithRetries(1, nil),  // one attempt, then:
		seqwatermill.WithHaltOnNack(),     // halt the account
		seqwatermill.WithController(&ctl), // to resume it
		seqwatermill.WithLogger(alerts),
	))
	handled := make(chan string)
	router.AddConsumerHandler("ledger", "ledger", sub, func(m *message.Message) error {
		acct := m.Metadata.Get("account_id")
		var op string
		var n int
		fmt.Sscan(string(m.Payload), &op, &n)
		mu.Lock()
		if op == "withdraw" && balance[acct] < n {
			mu.Unlock()
			return errors.New("insufficient funds")
		}
		if op == "withdraw" {
			n = -n
		}
		balance[acct] += n
		line := fmt.Sprintf("%s %s: balance %d", acct, m.Payload, balance[acct])
		mu.Unlock()
		handled <- line
		return nil
	})
	done := make(chan struct{})
	go func() { defer close(done); _ = router.Run(context.Background()) }()

	<-alerts.halts
	fmt.Println(<-handled) // bob goes on (so alice's deposit, sent before, is queued)
	fmt.Println("halted:", ctl.Halted(), "backlog:", ctl.Backlog("alice"))
	mu.Lock()
	balance["alice"] += 50 // the operator fixes the account
	mu.Unlock()
	_ = ctl.Resume("alice")
	fmt.Println(<-handled)
	fmt.Println(<-handled)
	_ = router.Close()
	<-done
	// Output:
	// bob deposit 5: balance 5
	// halted: [alice] backlog: 2
	// alice withdraw 150: balance 0
	// alice deposit 100: balance 100
}

// alerting is a logger that signals each halt on halts. (The record's
// "key" field holds the key quoted and cut, for logs; Controller.Halted
// lists the keys as they are.)
type alerting struct{ halts chan struct{} }

func (a alerting) Error(_ string, err error, _ watermill.LogFields) {
	if errors.Is(err, seqwatermill.ErrHalted) {
		a.halts <- struct{}{}
	}
}
func (a alerting) Info(string, watermill.LogFields)                 {}
func (a alerting) Debug(string, watermill.LogFields)                {}
func (a alerting) Trace(string, watermill.LogFields)                {}
func (a alerting) With(watermill.LogFields) watermill.LoggerAdapter { return a }

// Without a key option the decorator refuses to start, and the Router's Run
// says why.
func ExampleNewSubscriber_missingKey() {
	_, err := seqwatermill.NewSubscriber(newReleasing(0))
	fmt.Println(err)
	// Output:
	// seqwatermill: NewSubscriber: needs WithKeyMetadata or WithKeyFunc: invalid option
}

// Told the wrapped subscriber's ack timer (watermill-nats'
// AckWaitTimeout), NewSubscriber refuses retries whose default backoff
// outlasts it: the subscriber would give the message up during the wait.
func ExampleWithSubscriberAckTimeout() {
	_, err := seqwatermill.NewSubscriber(newReleasing(0),
		seqwatermill.WithKeyMetadata("account_id"),
		seqwatermill.WithRetries(10, nil),
		seqwatermill.WithSubscriberAckTimeout(time.Second),
	)
	fmt.Println(errors.Is(err, seqwatermill.ErrInvalidOption))
	var oe *seqwatermill.OptionError
	if errors.As(err, &oe) {
		fmt.Println(oe.Option)
	}
	// Output:
	// true
	// WithSubscriberAckTimeout(1s)
}

// An interceptor sees every hand-over of a message, with its attempt.
func ExampleWithInterceptor() {
	sub := newReleasing(1)
	m := message.NewMessage("1", []byte("deposit 5"))
	m.Metadata.Set("account_id", "alice")
	sub.in <- m

	s, _ := seqwatermill.NewSubscriber(sub,
		seqwatermill.WithKeyMetadata("account_id"),
		seqwatermill.WithRetries(0, func(context.Context, *message.Message, int, error) time.Duration { return 0 }),
		seqwatermill.WithInterceptor(func(ctx context.Context, msg *message.Message, next func(context.Context) error) error {
			err := next(ctx)
			fmt.Printf("message %s, attempt %d: %v\n", msg.UUID, seqwatermill.Attempt(ctx), err)
			return err
		}),
		seqwatermill.WithLogger(watermill.NopLogger{}),
	)
	out, _ := s.Subscribe(context.Background(), "deposits")
	(<-out).Nack() // the handler failed once
	(<-out).Ack()
	<-m.Acked()
	_ = s.Close()
	// Output:
	// message 1, attempt 1: seqwatermill: message nacked
	// message 1, attempt 2: <nil>
}
