package seqwatermill_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

// Keys and UUIDs come from publishers. watermill's StdLogger quotes only
// values with spaces, so every record holds them quoted and cut: a key
// with a line break cannot write a line of its own.
func TestAKeyWithANewlineCannotForgeALogLine(t *testing.T) {
	var out syncBuffer
	forged := "a\nlevel=ERROR msg=forged"
	r := newReleasing(1)
	r.in <- msg("a1\nlevel=ERROR msg=forged-too", forged)
	s, ch := subscribe(t, r, seqwatermill.WithRetries(2, noBackoff),
		seqwatermill.WithLogger(watermill.NewStdLoggerWithOut(&out, true, true)))
	next(t, ch).Nack() // logged at Info, with the key and the UUID
	next(t, ch).Ack()
	require.NoError(t, s.Close())
	text := out.String()
	require.Contains(t, text, "Message nacked, retrying in place")
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		assert.True(t, strings.HasPrefix(line, "[watermill] "), "a line not written by the logger: %q", line)
	}
	assert.Contains(t, text, `a\nlevel=ERROR msg=forged`, "the key, escaped")
}

// TestALongKeyIsCutInLogRecords: a key of 64 KiB makes no record that large.
func TestALongKeyIsCutInLogRecords(t *testing.T) {
	var out syncBuffer
	r := newReleasing(1)
	r.in <- msg("a1", strings.Repeat("k", 1<<16))
	s, ch := subscribe(t, r, seqwatermill.WithRetries(2, noBackoff),
		seqwatermill.WithLogger(watermill.NewStdLoggerWithOut(&out, true, true)))
	next(t, ch).Nack()
	next(t, ch).Ack()
	require.NoError(t, s.Close())
	assert.Contains(t, out.String(), "…(+65472 bytes)")
	assert.Less(t, out.Len(), 4096, "log output for one retry of a 64 KiB key")
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}
