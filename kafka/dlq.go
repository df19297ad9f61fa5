package kafka

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers DeadLetterTopic adds to a dead-lettered record.
const (
	HeaderError     = "seqsched-error"     // the last attempt's error text
	HeaderTopic     = "seqsched-topic"     // the record's original topic
	HeaderPartition = "seqsched-partition" // its original partition, in decimal
	HeaderOffset    = "seqsched-offset"    // its original offset, in decimal
)

// DeadLetterTopic returns a DeadLetterFunc that produces each failed record
// to topic with cl, synchronously: same key, value and headers, plus
// HeaderError, HeaderTopic, HeaderPartition and HeaderOffset. The record
// counts as done only once the broker acknowledged the copy. cl is any
// client that can produce (usually a producer the application already has);
// it must not be nil and topic must not be empty, else DeadLetterTopic
// returns an error wrapping ErrNilClient or ErrInvalidOption.
func DeadLetterTopic(cl *kgo.Client, topic string) (DeadLetterFunc, error) {
	if cl == nil {
		return nil, ErrNilClient
	}
	if topic == "" {
		return nil, &OptionError{Option: `DeadLetterTopic(cl, "")`, Reason: "topic must not be empty"}
	}
	return func(ctx context.Context, r *kgo.Record, cause error) error {
		hs := make([]kgo.RecordHeader, 0, len(r.Headers)+4)
		hs = append(hs, r.Headers...)
		hs = append(hs,
			kgo.RecordHeader{Key: HeaderError, Value: []byte(fmt.Sprint(cause))},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
			kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		)
		out := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs}
		return cl.ProduceSync(ctx, out).FirstErr()
	}, nil
}
