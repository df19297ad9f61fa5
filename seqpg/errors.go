package seqpg

import (
	"errors"
	"fmt"

	"github.com/seqsched/seqsched/internal/logkey"
	"github.com/seqsched/seqsched/internal/opterr"
)

// Sentinel errors. Every error the package returns wraps one of these, a
// pgx or PostgreSQL error, or is a context error returned unchanged, so
// callers can test with errors.Is.
var (
	// ErrInvalidOption is wrapped by the *OptionError that NewWorker
	// returns for an out-of-range option.
	ErrInvalidOption = errors.New("seqpg: invalid option")

	// ErrNilHandler is returned by NewWorker when the handler is nil.
	ErrNilHandler = errors.New("seqpg: nil handler")

	// ErrNilContext is returned when a nil context.Context is passed.
	ErrNilContext = errors.New("seqpg: nil context")

	// ErrInvalidKey is returned for an empty key, one longer than
	// MaxKeyBytes, or one that is not valid UTF-8 without NUL (a key is a
	// PostgreSQL text value).
	ErrInvalidKey = errors.New("seqpg: invalid key")

	// ErrNilTx is returned by Enqueue when the transaction is nil.
	ErrNilTx = errors.New("seqpg: nil transaction")

	// ErrClosed is returned by Run after Close has begun.
	ErrClosed = errors.New("seqpg: worker closed")

	// ErrRunning is returned by Run while another Run is in progress.
	ErrRunning = errors.New("seqpg: Run already in progress")

	// ErrLeaseLost is what a job's completion or failure meets when its
	// worker no longer holds the key's lease (it expired while the worker
	// was frozen or cut off, and another worker may have taken the key):
	// the handler's transaction is rolled back and nothing is recorded.
	// The worker logs it and counts it in Stats.LeaseLost.
	ErrLeaseLost = errors.New("seqpg: lease lost")

	// ErrJobTx is wrapped by the error of Commit and Rollback of a
	// handler's tx, which change nothing: the job's transaction is the
	// worker's, and commits with the job's completion (return nil) or
	// rolls back to the job's start (return an error). Once the handler
	// has returned, every method of its tx that returns an error returns
	// it (Conn and LargeObjects panic).
	ErrJobTx = errors.New("seqpg: the job's transaction ends with the job")

	// ErrTerminal marks a handler's error as not worth retrying (see
	// Terminal).
	ErrTerminal = errors.New("seqpg: terminal error")

	// ErrSchemaNewer is wrapped by Migrate's error when the database was
	// migrated by a newer version of seqpg.
	ErrSchemaNewer = errors.New("seqpg: database schema is newer than this code")
)

// MaxKeyBytes is the longest key, in bytes, that Enqueue and the
// per-key controls take. A key is a primary key in PostgreSQL's B-tree
// indexes, whose entries cannot exceed about a third of a page (2,704
// bytes with the default 8 KiB pages): a longer key would fail inside
// the caller's transaction and abort it. The bound leaves room for the
// indexes' other columns, and keeps what a worker holds per key small.
const MaxKeyBytes = 1024

// OptionError reports an option whose value is out of range. It wraps
// ErrInvalidOption.
//
// Option is the option as written, e.g. "WithMaxConcurrency(0)"; Reason,
// what the value must be, e.g. "must be >= 1".
// Error returns "seqpg: <Option>: <Reason>: invalid option".
type OptionError = opterr.Error[optionModule]

// optionModule makes OptionError this package's: its name opens the
// message, and it wraps ErrInvalidOption.
type optionModule struct{}

func (optionModule) Name() string    { return "seqpg" }
func (optionModule) Sentinel() error { return ErrInvalidOption }

// Terminal returns err marked as not worth retrying: a job whose handler
// returns it is dead-lettered (or halts its key, under WithHaltOnError) at
// once, whatever attempts are left. The result prints as err, unwraps to
// err, and wraps ErrTerminal; Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string   { return e.err.Error() }
func (e *terminalError) Unwrap() []error { return []error{e.err, ErrTerminal} }

// keyError returns why key cannot be a key, or nil.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("seqpg: empty key: %w", ErrInvalidKey)
	}
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("seqpg: key %s is %d bytes, more than MaxKeyBytes (%d): %w",
			logkey.Quote(key), len(key), MaxKeyBytes, ErrInvalidKey)
	}
	if !validUTF8NoNUL(key) {
		return fmt.Errorf("seqpg: key %s is not valid UTF-8 without NUL: %w", logkey.Quote(key), ErrInvalidKey)
	}
	return nil
}
