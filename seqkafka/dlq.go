package seqkafka

import (
	"context"
	"errors"
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
	HeaderAttempts  = "seqsched-attempts"  // how many attempts were made, in decimal
)

// DeadLetterTopic returns a DeadLetterFunc that produces each failed record
// to topic with cl, synchronously: same key, value and headers, plus
// HeaderError, HeaderTopic, HeaderPartition, HeaderOffset and
// HeaderAttempts. A header of the record under one of these names (set by
// its producer, or by an earlier dead-lettering) is left out of the copy,
// so each name appears once, with this consumer's value. The record counts
// as done only once the broker acknowledged the copy. cl is any client that can produce (usually a
// producer the application already has); it must not be nil and topic must
// not be empty, else DeadLetterTopic returns an *OptionError for each
// (wrapping ErrInvalidOption), joined.
func DeadLetterTopic(cl *kgo.Client, topic string) (DeadLetterFunc, error) {
	var errs []error
	if cl == nil {
		errs = append(errs, &OptionError{Option: "DeadLetterTopic(nil, ...)", Reason: "cl must not be nil"})
	}
	if topic == "" {
		errs = append(errs, &OptionError{Option: `DeadLetterTopic(cl, "")`, Reason: "topic must not be empty"})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return func(ctx context.Context, r *kgo.Record, attempts int, cause error) error {
		hs := make([]kgo.RecordHeader, 0, len(r.Headers)+5)
		for _, h := range r.Headers {
			if !isOurHeader(h.Key) { // a producer's own, which a reader could take for ours
				hs = append(hs, h)
			}
		}
		hs = append(hs,
			kgo.RecordHeader{Key: HeaderError, Value: []byte(fmt.Sprint(cause))},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
			kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
			kgo.RecordHeader{Key: HeaderAttempts, Value: strconv.AppendInt(nil, int64(attempts), 10)},
		)
		out := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs}
		return cl.ProduceSync(ctx, out).FirstErr()
	}, nil
}

// isOurHeader reports whether key is one of the headers DeadLetterTopic
// adds.
func isOurHeader(key string) bool {
	switch key {
	case HeaderError, HeaderTopic, HeaderPartition, HeaderOffset, HeaderAttempts:
		return true
	}
	return false
}
