package seqwatermill

import (
	"crypto/sha256"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched/internal/logkey"
)

// Keys come from publishers. A subscription holds a message's key only
// while it holds the message, except in the scheduler underneath, which
// keeps the keys of recently idle sessions (a few thousand) for reuse. So
// that a publisher's long keys cannot make that memory large, a key
// longer than maxKeyBytes is ordered under its SHA-256 sum instead: the
// scheduler, the bounds and the halts never hold more than maxKeyBytes of
// a key after its messages are gone. Two keys with one sum would only be
// ordered together, which keeps each one's order.
const maxKeyBytes = 128

// orderKey returns the key under which messages of key are ordered.
func orderKey(key string) string {
	if len(key) <= maxKeyBytes {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "\x00sha256:" + string(sum[:])
}

// fieldsOf returns the log fields of msg of key (the key as the message
// carries it). The key is quoted and cut (logkey.Quote): watermill's
// StdLogger quotes only values with spaces, so a key with a line break
// would otherwise write a line of the publisher's choosing.
func fieldsOf(key string, msg *message.Message) watermill.LogFields {
	return watermill.LogFields{"message_uuid": logkey.Quote(msg.UUID), "key": logkey.Quote(key)}
}
