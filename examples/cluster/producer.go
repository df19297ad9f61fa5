package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// window is how many asynchronous publishes a producer has in flight before
// it waits for their acknowledgements.
const window = 512

// Produce publishes perSession messages on each of sessions, round-robin,
// over its own connection. Every highEvery-th message (if highEvery > 0)
// carries the High header. Each message carries its number within its
// session and lane (HeaderSeq 1, 2, 3, ... for Normal, and separately for
// High), which nodes use to apply each message once and in order. A
// producer must own its sessions: two producers numbering one session would
// need to agree on the next number. It returns once the server has
// stored every message, or the first error.
func Produce(ctx context.Context, url, name string, sessions []string, perSession, highEvery int) error {
	nc, err := nats.Connect(url, nats.Name(name), nats.NoReconnect())
	if err != nil {
		return fmt.Errorf("cluster: producer %s: %w", name, err)
	}
	defer nc.Close()
	var (
		mu     sync.Mutex
		failed error
	)
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(2*window),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			mu.Lock()
			if failed == nil {
				failed = err
			}
			mu.Unlock()
		}))
	if err != nil {
		return fmt.Errorf("cluster: producer %s: %w", name, err)
	}
	settle := func() error {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		if failed != nil {
			return fmt.Errorf("cluster: producer %s: %w", name, failed)
		}
		return nil
	}
	next := make([][2]int, len(sessions)) // per session: last Normal and High Seq
	k := 0
	for range perSession {
		for i, s := range sessions {
			msg := nats.NewMsg("sessions." + s)
			lane := 0
			if k++; highEvery > 0 && k%highEvery == 0 {
				lane = 1
				msg.Header.Set(HeaderPriority, "high")
			}
			next[i][lane]++
			msg.Header.Set(HeaderSeq, strconv.Itoa(next[i][lane]))
			msg.Header.Set(HeaderSent, strconv.FormatInt(time.Now().UnixNano(), 10))
			if _, err := js.PublishMsgAsync(msg); err != nil {
				return fmt.Errorf("cluster: producer %s: %w", name, err)
			}
			if k%window == 0 {
				if err := settle(); err != nil {
					return err
				}
			}
		}
	}
	return settle()
}
