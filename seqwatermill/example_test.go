package seqwatermill_test

import (
	"context"
	"fmt"

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

// Without a key option the decorator refuses to start, and the Router's Run
// says why.
func ExampleNewSubscriber_missingKey() {
	_, err := seqwatermill.NewSubscriber(newReleasing(0))
	fmt.Println(err)
	// Output:
	// seqwatermill: NewSubscriber: needs WithKeyMetadata or WithKeyFunc: invalid option
}
