package seqpg

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Job is one job as its handler sees it. The handler may read it and keep
// it; changing it changes nothing in the database.
type Job struct {
	ID         int64     // unique among all jobs, assigned at Enqueue; not the order
	Key        string    // the order key
	Seq        int64     // the job's place in its key, in commit order (both lanes share one count)
	High       bool      // enqueued with High: runs before the key's Normal jobs
	Kind       string    // what Enqueue's Kind option said; "" without it
	Payload    []byte    // what Enqueue was given
	Tag        string    // Replace's tag; "" without it
	Attempt    int       // 1 for the first attempt (of this budget: Resume of a halted key starts a new one)
	EnqueuedAt time.Time // when its Enqueue ran (or, for a replaced job, the Enqueue that replaced it)
}

// Fence is a job's lease, in its handler's ctx (see LeaseOf): Token grows
// with every lease of every key, so a store outside PostgreSQL can refuse
// a write that carries a smaller token than one it has seen for Key (the
// fencing token of Kleppmann's "How to do distributed locking").
type Fence struct {
	Key   string
	Token int64
}

type fenceKey struct{}

// LeaseOf returns the lease under which the job of the handler call whose
// ctx is ctx runs, and false for any other ctx.
func LeaseOf(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// scanJob reads a job of key from a row of sqlHead's or sqlFetch's
// columns.
func scanJob(r pgx.Row, key string) (*Job, error) {
	j := &Job{Key: key}
	var lane int16
	var attempt int
	if err := r.Scan(&j.ID, &lane, &j.Seq, &j.Kind, &j.Payload, &j.Tag, &attempt, &j.EnqueuedAt); err != nil {
		return nil, err
	}
	j.High = lane == laneHigh
	j.Attempt = attempt + 1
	return j, nil
}

func validUTF8NoNUL(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
