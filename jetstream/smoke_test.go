package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/seqsched/seqsched/jetstream"
)

func TestSmoke(t *testing.T) {
	url := startServer(t)
	_, js := connect(t, url)
	s := newStream(t, js, natsjs.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	cons := newConsumer(t, s, natsjs.ConsumerConfig{Durable: "d", AckWait: time.Second})
	l := newLedger()
	c, err := jetstream.NewConsumer([]natsjs.Consumer{cons}, func(ctx context.Context, m natsjs.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	for i := range 100 {
		publish(t, js, fmt.Sprintf("k.%d", i%5), "x")
	}
	eventually(t, func() bool { return c.Stats().Acked == 100 }, "acks: %+v", c.Stats())
	t.Logf("%+v", c.Stats())
}
