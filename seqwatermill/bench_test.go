package seqwatermill_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/seqsched/seqsched/seqwatermill"
)

// BenchmarkRouter measures a watermill Router handling 200 messages over
// 100 keys with a 1ms handler, on gochannel, three ways: the plain Router
// on an ordered gochannel (Publish waits for the Ack: one message at a
// time), the plain Router on the default gochannel (parallel, no order),
// and the Router with this package's decorator on the ordered gochannel
// (in order per key, keys in parallel).
//
//	go test -run '^$' -bench BenchmarkRouter ./seqwatermill/
func BenchmarkRouter(b *testing.B) {
	for _, c := range []struct {
		name    string
		ordered bool
		opts    []seqwatermill.Option
	}{
		{name: "plain-ordered-gochannel", ordered: true},
		{name: "plain-default-gochannel"},
		{name: "seqwatermill-ordered-gochannel", ordered: true, opts: []seqwatermill.Option{
			seqwatermill.WithKeyMetadata("key"), seqwatermill.WithAckOnReceive()}},
	} {
		b.Run(c.name, func(b *testing.B) { benchRouter(b, c.ordered, c.opts) })
	}
}

func benchRouter(b *testing.B, ordered bool, opts []seqwatermill.Option) {
	const n, keys = 200, 100
	bus := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: ordered}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	if opts != nil {
		router.AddSubscriberDecorators(seqwatermill.Decorator(append(opts, seqwatermill.WithLogger(watermill.NopLogger{}))...))
	}
	var handled atomic.Int64
	round := make(chan struct{}, 1)
	router.AddConsumerHandler("h", "events", bus, func(*message.Message) error {
		time.Sleep(time.Millisecond) // the handler's I/O
		if handled.Add(1)%n == 0 {
			round <- struct{}{}
		}
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()
	publish := func() {
		for i := range n {
			m := message.NewMessage(watermill.NewUUID(), nil)
			m.Metadata.Set("key", fmt.Sprint(i%keys))
			if err := bus.Publish("events", m); err != nil {
				b.Fatal(err)
			}
		}
		<-round
	}
	start := time.Now()
	rounds := 0
	for b.Loop() {
		publish()
		rounds++
	}
	b.ReportMetric(float64(rounds*n)/time.Since(start).Seconds(), "msgs/s")
	if err := router.Close(); err != nil {
		b.Fatal(err)
	}
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	if err := bus.Close(); err != nil {
		b.Fatal(err)
	}
}
