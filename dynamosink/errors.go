package dynamosink

import (
	"errors"
	"fmt"

	"github.com/gostream/kinesub/lease"
)

var (
	// ErrReplay is Apply's answer for a record at or below its key's mark: its effect was
	// applied before (by this instance or another holder of its shard), and nothing was
	// written now. A handler that gets it should ack the record.
	ErrReplay = errors.New("dynamosink: record already applied (replay)")

	// ErrSuperseded is Apply's answer for a record read under a holding of its shard older
	// than the one that last wrote its key's mark: a later holder of the shard has taken over,
	// and nothing was written. The record is the later holder's to apply. Errors wrapping it
	// are *SupersededError.
	ErrSuperseded = errors.New("dynamosink: shard holding superseded")

	// ErrEffectCondition is Apply's answer when a condition of one of the caller's own items
	// did not hold: nothing was written, and trying again gives the same answer until the
	// item changes.
	ErrEffectCondition = errors.New("dynamosink: an effect's condition failed")

	// ErrInvalidOption wraps the errors of New for invalid arguments or options.
	ErrInvalidOption = errors.New("dynamosink: invalid option")

	// ErrInvalidRecord wraps Apply's errors for a record or items it cannot write (no order
	// key, a malformed sequence number, no holding, too many items), found before any I/O.
	ErrInvalidRecord = errors.New("dynamosink: invalid record")
)

// SupersededError says which holding last wrote a key's mark. It wraps ErrSuperseded.
type SupersededError struct {
	Key   string       // the mark's key
	Shard string       // the shard both holdings are of
	Mark  lease.Tenure // the holding that last wrote the mark
	Yours lease.Tenure // the holding the refused record was read under
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("%v: key %q of shard %s was last written under counter %d (%s), the record was read under %d (%s)",
		ErrSuperseded, e.Key, e.Shard, e.Mark.Counter, e.Mark.Owner, e.Yours.Counter, e.Yours.Owner)
}

func (e *SupersededError) Unwrap() error { return ErrSuperseded }
