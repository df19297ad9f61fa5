package seqwatermill_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"

	"github.com/seqsched/seqsched/seqwatermill"
)

// Messages without WithKeyMetadata's field share the empty key, one at a
// time: the first is logged at Error with ErrNoKey, and only the first.
func TestAMessageWithoutTheKeyMetadataIsLoggedOnce(t *testing.T) {
	r := newReleasing(3)
	log := &noKeyLog{}
	for i := range 3 {
		r.in <- message.NewMessage(fmt.Sprint("m", i), nil) // no "key"
	}
	_, out := subscribe(t, r, seqwatermill.WithLogger(log))
	for range 3 {
		next(t, out).Ack()
	}
	assert.Equal(t, []string{`"m0"`}, log.uuids, "messages logged with ErrNoKey")
}

type noKeyLog struct {
	watermill.NopLogger
	uuids []string // of ErrNoKey records; written by the dispatch goroutine only, read after
}

func (l *noKeyLog) Error(_ string, err error, f watermill.LogFields) {
	if errors.Is(err, seqwatermill.ErrNoKey) {
		l.uuids = append(l.uuids, f["message_uuid"].(string))
	}
}
func (l *noKeyLog) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// Publishers choose keys. Once its messages are done, a key leaves at most
// a bounded trace: 1,000 keys of 64 KiB each (62.5 MiB) leave less than
// 8 MiB held, although the scheduler underneath keeps the records of
// thousands of recently idle keys.
func TestLongKeysAreNotHeldAfterTheirMessages(t *testing.T) {
	const n, size = 1000, 64 << 10
	r := &releasing{in: make(chan *message.Message)}
	_, out := subscribe(t, r)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	go func() {
		for i := range n {
			key := fmt.Sprint(i) + strings.Repeat("k", size)
			r.in <- msg(fmt.Sprint(i), key)
		}
	}()
	for range n {
		next(t, out).Ack()
	}
	after := heap()
	held := int64(after) - int64(before)
	assert.Less(t, held, int64(8<<20), "bytes held after %d keys of %d bytes", n, size)
}
