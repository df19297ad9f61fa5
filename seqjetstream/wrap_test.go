package seqjetstream_test

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// wrapConsumer is a JetStream consumer whose fetched messages pass through
// wrap: how the tests watch, drop or fail a message's answers to the
// server without touching the package's internals. A nil from wrap loses
// the delivery on its way, as nats.go does with the messages still in
// flight when a pull's ctx ends, or a reconnect with those on the wire:
// the server counts it delivered and redelivers it after its AckWait.
type wrapConsumer struct {
	jetstream.Consumer
	wrap func(jetstream.Msg) jetstream.Msg
}

func (w wrapConsumer) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	b, err := w.Consumer.Fetch(n, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan jetstream.Msg)
	go func() { // ends when the fetch does: the consumer reads every message
		defer close(out)
		for m := range b.Messages() {
			if wm := w.wrap(m); wm != nil {
				out <- wm
			}
		}
	}()
	return wrapBatch{b, out}, nil
}

type wrapBatch struct {
	jetstream.MessageBatch
	msgs chan jetstream.Msg
}

func (b wrapBatch) Messages() <-chan jetstream.Msg { return b.msgs }

// hookMsg is a message whose answers call the hooks first; a hook that
// returns false drops the answer (it never reaches the server).
type hookMsg struct {
	jetstream.Msg
	onAck, onTerm, onNak, onProgress func() bool
}

func (m hookMsg) Ack() error {
	if m.onAck != nil && !m.onAck() {
		return nil
	}
	return m.Msg.Ack()
}

func (m hookMsg) Term() error {
	if m.onTerm != nil && !m.onTerm() {
		return nil
	}
	return m.Msg.Term()
}

func (m hookMsg) TermWithReason(r string) error {
	if m.onTerm != nil && !m.onTerm() {
		return nil
	}
	return m.Msg.TermWithReason(r)
}

func (m hookMsg) Nak() error {
	if m.onNak != nil && !m.onNak() {
		return nil
	}
	return m.Msg.Nak()
}

func (m hookMsg) NakWithDelay(d time.Duration) error {
	if m.onNak != nil && !m.onNak() {
		return nil
	}
	return m.Msg.NakWithDelay(d)
}

func (m hookMsg) InProgress() error {
	if m.onProgress != nil && !m.onProgress() {
		return nil
	}
	return m.Msg.InProgress()
}

// unpinHook is a JetStream whose streams' UnpinConsumer calls before
// first: how a test sees when an instance unpins a partition.
type unpinHook struct {
	jetstream.JetStream
	before func()
}

func (j unpinHook) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return unpinHookStream{s, j.before}, nil
}

type unpinHookStream struct {
	jetstream.Stream
	before func()
}

func (s unpinHookStream) UnpinConsumer(ctx context.Context, consumer, group string) error {
	s.before()
	return s.Stream.UnpinConsumer(ctx, consumer, group)
}
