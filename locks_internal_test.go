package seqsched

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The lock check can fail: user code called through try with a shard lock
// held is counted.
func TestLockCheckSeesUserCodeUnderALock(t *testing.T) {
	stop := CheckLocks()
	defer stop()
	var sh shard[int]
	sh.mu.Lock()
	try(func(struct{}) struct{} { return struct{}{} }, struct{}{})
	sh.mu.Unlock()
	try(func(struct{}) struct{} { return struct{}{} }, struct{}{})
	violations, checked := stop()
	require.Equal(t, [2]int64{1, 2}, [2]int64{violations, checked}, "one call under the lock, one without")
}
