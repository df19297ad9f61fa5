package ledger

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/seqsched/seqsched"
)

// journal writes one line per committed change. It follows each operation
// from a scheduler of its own, keyed by account, so lines of one account
// come out in order, and a slow writer delays only the journal, never the
// accounts: an account's turn ends at commit, and the line is written later,
// by a task that awaits the operation's Pending elsewhere.
type journal struct {
	sched *seqsched.Scheduler[AccountID]
	mu    sync.Mutex // guards w
	w     io.Writer
}

func newJournal(w io.Writer) (*journal, error) {
	if w == nil {
		w = io.Discard
	}
	s, err := seqsched.New[AccountID]()
	if err != nil {
		return nil, err
	}
	return &journal{sched: s, w: w}, nil
}

// follow queues a task that waits for p and journals it if it committed.
// The task runs even if ctx is canceled later: a committed change is
// journaled whatever happened to its caller.
func (j *journal) follow(ctx context.Context, id AccountID, p Pending) error {
	_, err := j.sched.Go(context.WithoutCancel(ctx), id, func(ctx context.Context) error {
		r, err := p.Await(ctx)
		if err != nil || r.Op == OpBalance || r.Op == OpAudit || r.Replayed {
			return nil // nothing committed
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		_, err = fmt.Fprintln(j.w, r)
		return err
	})
	return err
}

// close waits for every queued line to be written.
func (j *journal) close(ctx context.Context) error {
	return j.sched.Shutdown(ctx)
}

// String formats a receipt as a journal line.
func (r Receipt) String() string {
	switch r.Op {
	case OpTransfer:
		return fmt.Sprintf("account=%d op=%s amount=%d to=%d balance=%d version=%d",
			r.Account, r.Op, r.Amount, r.To, r.Balance, r.Version)
	case OpFreeze:
		return fmt.Sprintf("account=%d op=%s balance=%d version=%d", r.Account, r.Op, r.Balance, r.Version)
	}
	return fmt.Sprintf("account=%d op=%s amount=%d balance=%d version=%d",
		r.Account, r.Op, r.Amount, r.Balance, r.Version)
}
