package seqjetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers DeadLetterSubject adds to a dead-lettered copy.
const (
	HeaderSubject  = "Seqsched-Subject"  // the message's original subject
	HeaderStream   = "Seqsched-Stream"   // the stream it was stored in
	HeaderSequence = "Seqsched-Sequence" // its stream sequence, in decimal
	HeaderAttempts = "Seqsched-Attempts" // how many attempts were made, in decimal
	HeaderError    = "Seqsched-Error"    // the last attempt's error
)

// DeadLetterSubject returns a DeadLetterFunc that publishes a copy of each
// failed message to subject through js and waits for the stream's
// acknowledgement, so the subject must be stored by a stream (a
// dead-letter stream). The copy has the original data and headers, except
// the server's own "Nats-" headers (which could make the publish fail),
// plus HeaderSubject, HeaderStream, HeaderSequence, HeaderAttempts and
// HeaderError. The message counts as dead-lettered only once the stream
// acknowledged the copy. js must not be nil and subject must not be empty,
// else DeadLetterSubject returns an *OptionError for each (wrapping
// ErrInvalidOption), joined.
func DeadLetterSubject(js jetstream.JetStream, subject string) (DeadLetterFunc, error) {
	var errs []error
	if js == nil {
		errs = append(errs, &OptionError{Option: "DeadLetterSubject(nil, ...)", Reason: "js must not be nil"})
	}
	if subject == "" {
		errs = append(errs, &OptionError{Option: `DeadLetterSubject(js, "")`, Reason: "subject must not be empty"})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return func(ctx context.Context, msg jetstream.Msg, attempts int, err error) error {
		out := nats.NewMsg(subject)
		out.Data = msg.Data()
		for k, vs := range msg.Headers() {
			if !strings.HasPrefix(k, "Nats-") {
				out.Header[k] = vs
			}
		}
		out.Header.Set(HeaderSubject, msg.Subject())
		if meta, err := msg.Metadata(); err == nil {
			out.Header.Set(HeaderStream, meta.Stream)
			out.Header.Set(HeaderSequence, strconv.FormatUint(meta.Sequence.Stream, 10))
		}
		out.Header.Set(HeaderAttempts, strconv.Itoa(attempts))
		out.Header.Set(HeaderError, fmt.Sprint(err))
		_, perr := js.PublishMsg(ctx, out)
		return perr
	}, nil
}
