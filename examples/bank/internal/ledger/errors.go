package ledger

import (
	"errors"
	"fmt"
)

// Errors an operation can fail with. Every *OpError wraps one of these, or a
// database or seqsched error.
var (
	ErrUnknownAccount    = errors.New("ledger: unknown account")
	ErrInvalidAmount     = errors.New("ledger: amount must be positive")
	ErrInsufficientFunds = errors.New("ledger: insufficient funds")
	ErrFrozen            = errors.New("ledger: account frozen")
	ErrSameAccount       = errors.New("ledger: transfer to the same account")
	ErrClosed            = errors.New("ledger: bank closed")
	// ErrOverflow: the change would take the balance past the largest
	// amount a balance holds (math.MaxInt64).
	ErrOverflow = errors.New("ledger: balance would overflow")
	// ErrBadRequestID: a RequestID that is empty or longer than
	// MaxRequestID bytes.
	ErrBadRequestID = errors.New("ledger: bad request ID")
	// ErrRequestReused: a RequestID already used for a different
	// operation (another op, account or amount); nothing was changed.
	ErrRequestReused = errors.New("ledger: request ID already used for another operation")
)

// OpError describes a failed operation: which one, on which account, and why.
type OpError struct {
	Op      Op
	Account AccountID
	To      AccountID // transfers only
	Amount  int64
	Err     error
}

func (e *OpError) Error() string {
	switch {
	case e.Op == OpTransfer:
		return fmt.Sprintf("%s %d from account %d to %d: %v", e.Op, e.Amount, e.Account, e.To, e.Err)
	case e.Amount != 0:
		return fmt.Sprintf("%s %d on account %d: %v", e.Op, e.Amount, e.Account, e.Err)
	}
	return fmt.Sprintf("%s on account %d: %v", e.Op, e.Account, e.Err)
}

// Unwrap returns the cause, so errors.Is(err, ErrInsufficientFunds) works.
func (e *OpError) Unwrap() error { return e.Err }
