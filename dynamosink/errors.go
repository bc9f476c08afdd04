package dynamosink

import (
	"errors"
	"fmt"

	"github.com/gostream/kinesub/lease"
)

var (
	// ErrReplay is Apply's answer for a record at or below its key's mark in its shard, in its
	// epoch, and not recorded as skipped: under the package's contract (doc.go) it was applied
	// before, by this instance or another, and nothing was written now. A handler that gets it
	// acks the record.
	ErrReplay = errors.New("dynamosink: record already applied (replay)")

	// ErrOutOfOrder is Apply's answer for a record recorded as not applied (Skip, DeadLetter)
	// below its key's mark: a later record of its key in its shard was applied, this one was
	// not, and nothing was written now. Apply never writes a record behind a later one of its
	// key; RedriveMark does, on purpose. It is permanent (Permanent).
	ErrOutOfOrder = errors.New("dynamosink: a later record of the key was applied, this one was not (redrive it with Redrive)")

	// ErrOtherWrites is Apply's answer for the record its key's mark was last written for, when
	// that Apply wrote other items (tables and keys) than this one would: a second Apply for
	// one record, or two Sinks sharing a mark table without WithKeyPrefix. Nothing was
	// written. It is permanent (Permanent): put all of a record's writes in one Apply, and
	// give each Sink of a table its own prefix.
	ErrOtherWrites = errors.New("dynamosink: the record was applied before with other writes")

	// ErrSuperseded is Apply's answer for a record whose key's mark was written under a later
	// holding of its shard (same WithLeaseTable, higher lease counter), or in a later replay
	// epoch (WithEpoch): nothing was written, and the record is the later holder's or epoch's
	// to apply. Errors wrapping it are *SupersededError.
	ErrSuperseded = errors.New("dynamosink: superseded by a later holding or epoch")

	// ErrEffectCondition is Apply's answer when a condition of one of the caller's own items
	// did not hold: nothing was written, and trying again gives the same answer until the
	// item changes. It is permanent (Permanent).
	ErrEffectCondition = errors.New("dynamosink: an effect's condition failed")

	// ErrInvalidOption wraps the errors of New for invalid arguments or options.
	ErrInvalidOption = errors.New("dynamosink: invalid option")

	// ErrInvalidRecord wraps Apply's errors for a record or items it cannot write: found
	// before any I/O (a malformed sequence number, no holding, too many items, an item of the
	// mark table, a mark key too long) or refused by DynamoDB as invalid (a ValidationException:
	// an item over 400 KB, a transaction over 4 MB, one item written twice, a missing table).
	// It is permanent (Permanent).
	ErrInvalidRecord = errors.New("dynamosink: invalid record")
)

// Permanent reports whether err is an answer of Apply that trying again will not change:
// ErrInvalidRecord, ErrEffectCondition (until the caller's item changes), ErrOutOfOrder,
// ErrOtherWrites, and ErrSuperseded by a later epoch (a *SupersededError with Epoch set).
// Throttles, conflicts, timeouts and a superseded holding (which ends when the subscriber
// notices its lease was taken) are not.
func Permanent(err error) bool {
	var se *SupersededError
	if errors.As(err, &se) {
		return se.Epoch
	}
	return errors.Is(err, ErrInvalidRecord) || errors.Is(err, ErrEffectCondition) ||
		errors.Is(err, ErrOutOfOrder) || errors.Is(err, ErrOtherWrites)
}

// SupersededError says which holding or epoch last wrote a key's mark. It wraps
// ErrSuperseded.
type SupersededError struct {
	Key   string // the mark's key
	Shard string // the shard of the record and the mark
	// Epoch is true when the mark was written in a later replay epoch (MarkEpoch >
	// YoursEpoch), false when by a later holding of the shard (Mark.Counter > Yours.Counter).
	Epoch      bool
	Mark       lease.Tenure // the holding that last wrote the mark
	Yours      lease.Tenure // the holding the refused record was read under
	MarkEpoch  int64
	YoursEpoch int64
}

func (e *SupersededError) Error() string {
	if e.Epoch {
		return fmt.Sprintf("%v: key %q of shard %s was last written in epoch %d, the record is of epoch %d",
			ErrSuperseded, e.Key, e.Shard, e.MarkEpoch, e.YoursEpoch)
	}
	return fmt.Sprintf("%v: key %q of shard %s was last written under counter %d (%s), the record was read under %d (%s)",
		ErrSuperseded, e.Key, e.Shard, e.Mark.Counter, e.Mark.Owner, e.Yours.Counter, e.Yours.Owner)
}

func (e *SupersededError) Unwrap() error { return ErrSuperseded }
