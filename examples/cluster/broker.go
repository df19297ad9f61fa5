package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// Message headers set by producers.
const (
	HeaderPriority = "Seqsched-Priority" // "high" marks a High message
	HeaderSeq      = "Seqsched-Seq"      // the message's number in its session and lane: 1, 2, 3, ...
	HeaderSent     = "Seqsched-Sent"     // publish time, Unix nanoseconds (latency only)
)

// group is the consumers' one priority group: every node pulls in it, and
// the pinned-client policy delivers to one of them at a time.
const group = "owners"

// Topology is how the sessions are laid out on JetStream: one stream whose
// subject transform hashes each session onto one of Partitions subjects, and
// one durable pull consumer per partition with the pinned-client priority
// policy.
type Topology struct {
	Stream     string // stream name; Setup deletes and recreates it
	Partitions int    // P: sessions.<id> → part.<hash(id) mod P>.<id>

	// AckWait is how long a delivered message may stay unacknowledged before
	// it is redelivered. PullExpiry is how long each pull request lives; a
	// node renews its pin with every pull, so PinnedTTL, how long the server
	// keeps a silent node pinned before it pins another, must be longer.
	// Keep AckWait + PullExpiry < PinnedTTL: every message a dead node held
	// is then due for redelivery when the next node is pinned, and few
	// arrive Early. Correctness does not depend on these timings (the
	// Store's sequence check does not), only how fast a partition recovers.
	AckWait    time.Duration
	PullExpiry time.Duration
	PinnedTTL  time.Duration

	// RetryDelay is how long an Early message waits before JetStream
	// redelivers it.
	RetryDelay time.Duration

	// MaxAckPending bounds the unacknowledged messages of one partition,
	// and so the work a node queues for it.
	MaxAckPending int
}

func (t Topology) consumer(p int) string { return fmt.Sprintf("part-%d", p) }

func (t Topology) validate() error {
	switch {
	case t.Stream == "":
		return errors.New("cluster: Topology.Stream is empty")
	case t.Partitions < 1:
		return fmt.Errorf("cluster: Topology.Partitions = %d; must be >= 1", t.Partitions)
	case t.PullExpiry < time.Second:
		return fmt.Errorf("cluster: Topology.PullExpiry = %v; nats.go needs >= 1s", t.PullExpiry)
	case t.PinnedTTL <= t.PullExpiry:
		return fmt.Errorf("cluster: PinnedTTL %v must be > PullExpiry %v, or pins move between pulls", t.PinnedTTL, t.PullExpiry)
	case t.AckWait <= 0 || t.RetryDelay <= 0:
		return fmt.Errorf("cluster: AckWait %v and RetryDelay %v must be > 0", t.AckWait, t.RetryDelay)
	case t.MaxAckPending < 1:
		return fmt.Errorf("cluster: Topology.MaxAckPending = %d; must be >= 1", t.MaxAckPending)
	}
	return nil
}

// Setup (re)creates t's stream and its consumers. The stream takes
// "sessions.*" and stores each message under
// "part.{{partition(P,1)}}.{{wildcard(1)}}": the server's deterministic
// FNV-1a hash of the session ID picks the partition, so every message of a
// session lands in the same partition, in publish order.
func Setup(ctx context.Context, js jetstream.JetStream, t Topology) error {
	if err := t.validate(); err != nil {
		return err
	}
	if err := js.DeleteStream(ctx, t.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("cluster: delete stream %s: %w", t.Stream, err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     t.Stream,
		Subjects: []string{"sessions.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      "sessions.*",
			Destination: fmt.Sprintf("part.{{partition(%d,1)}}.{{wildcard(1)}}", t.Partitions),
		},
		Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("cluster: create stream %s: %w", t.Stream, err)
	}
	for p := range t.Partitions {
		_, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:        t.consumer(p),
			FilterSubject:  fmt.Sprintf("part.%d.*", p),
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        t.AckWait,
			MaxAckPending:  t.MaxAckPending,
			PriorityPolicy: jetstream.PriorityPolicyPinned,
			PriorityGroups: []string{group},
			PinnedTTL:      t.PinnedTTL,
		})
		if err != nil {
			return fmt.Errorf("cluster: create consumer %s: %w", t.consumer(p), err)
		}
	}
	return nil
}

// StartEmbedded starts a NATS server with JetStream in this process,
// listening on 127.0.0.1 only, on a free port, storing in dir. Stop it with
// Shutdown and WaitForShutdown.
func StartEmbedded(dir string) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		ServerName: "seqsched-cluster",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, errors.New("cluster: embedded server not ready after 10s")
	}
	return s, nil
}
