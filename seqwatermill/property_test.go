package seqwatermill_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched/seqwatermill"
)

// The property: whatever a subscriber's timers do, each key's message is
// handled only after every earlier one of its key (a repeat of one
// handled already is at least once), never two of a key at once, and
// every message is handled. A model of watermill-nats over
// JetStream, in fake time (testing/synctest): the subscriber sends one
// message at a time and waits for its Ack; it gives a message up after
// ackTimeout (cancels its ctx, sends the next), and the "broker" sends it
// again ackWait after its delivery. Handlers take random times, shorter and
// longer than both timers, and nack at random. Each run takes a seed and
// prints it; a seed that ever failed joins regressionSeeds.

// regressionSeeds run every time. The first four failed on the version
// before the give-up fixes (two of a key in the handler at once, and a
// key's later message handled before an earlier one).
var regressionSeeds = []uint64{7658352112045630181, 7586521056465667831, 2222990973175030828, 9704605712702633361}

func TestPropertyOrderSurvivesTheSubscribersTimers(t *testing.T) {
	seeds := append(slices.Clone(regressionSeeds), rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64())
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { checkTimersProperty(t, seed) })
		})
	}
}

const (
	propMessages   = 60
	propKeys       = 4
	propAckTimeout = 100 * time.Millisecond // the subscriber gives a message up
	propAckWait    = 150 * time.Millisecond // the broker sends it again
)

func checkTimersProperty(t *testing.T, seed uint64) {
	t.Logf("seed %d (add it to regressionSeeds if this run fails)", seed)
	sub := newTimerSub(propMessages)
	s, err := seqwatermill.NewSubscriber(sub, seqwatermill.WithKeyMetadata("key"),
		seqwatermill.WithRetries(0, func(context.Context, *message.Message, int, error) time.Duration { return 20 * time.Millisecond }),
		seqwatermill.WithLogger(watermill.NopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Subscribe(context.Background(), "topic")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		in      = map[string]int{}
		overlap []string
		handled = map[string][]int{}
		calls   = map[string]int{}
		wg      sync.WaitGroup
	)
	decide := func(uuid string, call int) (time.Duration, bool) { // the handler's time and outcome for this call
		r := rand.New(rand.NewPCG(seed, uint64(len(uuid))<<32|uint64(call)^hashString(uuid)))
		return time.Duration(r.IntN(250)) * time.Millisecond, r.IntN(5) != 0
	}
	go func() {
		for m := range out {
			wg.Add(1)
			go func() { // as the Router: a goroutine per message
				defer wg.Done()
				key := m.Metadata.Get("key")
				mu.Lock()
				if in[key]++; in[key] > 1 {
					overlap = append(overlap, key)
				}
				calls[m.UUID]++
				d, ok := decide(m.UUID, calls[m.UUID])
				mu.Unlock()
				time.Sleep(d) // the handler's work, in fake time
				mu.Lock()
				in[key]--
				if ok {
					var i int
					fmt.Sscan(string(m.Payload), &i)
					handled[key] = append(handled[key], i)
				}
				mu.Unlock()
				if ok {
					m.Ack()
				} else {
					m.Nack()
				}
			}()
		}
	}()
	<-sub.allAcked
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("received %d, given up %d, redelivered %d, duplicates %d, retries %d",
		st.Received, st.GivenUp, st.Redelivered, st.Duplicates, st.Retries)
	mu.Lock()
	defer mu.Unlock()
	if len(overlap) > 0 {
		t.Errorf("keys with two messages in the handler at once: %v", overlap)
	}
	for k := range propKeys {
		key := fmt.Sprint("k", k)
		var want []int
		for i := k; i < propMessages; i += propKeys {
			want = append(want, i)
		}
		if v := orderViolation(handled[key], want); v != "" {
			t.Errorf("key %s: %s; handled %v", key, v, handled[key])
		}
	}
}

func hashString(s string) (h uint64) {
	for _, c := range []byte(s) {
		h = h*131 + uint64(c)
	}
	return h
}

// timerSub models watermill-nats over JetStream: one message at a time,
// given up after propAckTimeout, sent again propAckWait after its delivery
// while it is not acked.
type timerSub struct {
	mu       sync.Mutex
	queue    []int        // message indexes to deliver, in the broker's order
	acked    map[int]bool // by the broker
	wake     chan struct{}
	allAcked chan struct{}
	closing  chan struct{}
	once     sync.Once
	uuids    []string
}

func newTimerSub(n int) *timerSub {
	s := &timerSub{acked: map[int]bool{}, wake: make(chan struct{}, 1), allAcked: make(chan struct{}),
		closing: make(chan struct{})}
	for i := range n {
		s.queue = append(s.queue, i)
		s.uuids = append(s.uuids, watermill.NewUUID())
	}
	return s
}

func (s *timerSub) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for {
			s.mu.Lock()
			if len(s.acked) == len(s.uuids) {
				s.mu.Unlock()
				s.once.Do(func() { close(s.allAcked) })
				<-s.closing
				return
			}
			if len(s.queue) == 0 {
				s.mu.Unlock()
				select {
				case <-s.wake:
					continue
				case <-s.closing:
					return
				}
			}
			i := s.queue[0]
			s.queue = s.queue[1:]
			done := s.acked[i]
			s.mu.Unlock()
			if done {
				continue // acked after this redelivery was queued
			}
			if !s.deliver(ctx, out, i) {
				return
			}
		}
	}()
	return out, nil
}

// deliver sends message i once and waits for its Ack, Nack or give-up; it
// returns false when the subscriber closes.
func (s *timerSub) deliver(ctx context.Context, out chan<- *message.Message, i int) bool {
	m := message.NewMessage(s.uuids[i], []byte(fmt.Sprint(i)))
	m.Metadata.Set("key", fmt.Sprint("k", i%propKeys))
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.SetContext(mctx)
	redeliver := time.AfterFunc(propAckWait, func() { s.requeue(i) }) // the broker's AckWait
	select {
	case out <- m:
	case <-s.closing:
		redeliver.Stop()
		return false
	}
	giveUp := time.NewTimer(propAckTimeout)
	defer giveUp.Stop()
	select {
	case <-m.Acked():
		redeliver.Stop()
		s.mu.Lock()
		s.acked[i] = true
		s.mu.Unlock()
	case <-m.Nacked():
		redeliver.Stop()
		s.requeue(i)
	case <-giveUp.C: // cancel (deferred) and go on; the broker sends it again after AckWait
	case <-s.closing:
		return false
	}
	return true
}

// requeue puts message i at the back of the broker's queue, unless acked.
func (s *timerSub) requeue(i int) {
	s.mu.Lock()
	if !s.acked[i] {
		s.queue = append(s.queue, i)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *timerSub) Close() error {
	select {
	case <-s.closing:
	default:
		close(s.closing)
	}
	return nil
}
