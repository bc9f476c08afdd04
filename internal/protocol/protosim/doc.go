// Package protosim drives the lease protocol's state machine (package protocol) in a fleet, on
// one thread: a seeded simulator (Run) and an exhaustive explorer of small fleets (Explore).
// The machine is a Core: protocol.Machine in production (Machines), or a test's own.
//
// Both play the machines' interpreter: they perform each store operation a Machine sends
// against a model of the lease table with DynamoDB's semantics (table.go: conditional writes
// linearizable per item, strongly consistent reads, listings whose index may lag for rows
// just created), through an adversarial network (answers lost after the write was applied,
// writes applied after their sender was told Unknown, writes refused, an instance cut off the
// store), and feed the answers back. The Kinesis side is modelled simply: a shard is read by
// whichever instance was told StartReading for it, and records are "handed out" whenever the
// driver asks MayHandOut at an instant. Each host has a wall clock offset from the others and
// a monotonic clock running at a rate within the protocol's assumption (rates agree within
// TTL/12 over a TTL).
//
// The checker (check.go) holds every run to the protocol's promises as it goes:
//
//   - never two readers: for each shard, once a holding (Tenure) handed out, no holding that
//     handed out before it ever hands out again, and no two holdings hand out at one instant;
//   - a holding hands out only under the Tenure it was told to read under;
//   - checkpoints never move back: within a holding the applied checkpoint only grows (a late
//     ordered write changes nothing), SHARD_END stays, and a shard's row is never deleted
//     before its end. A new holding starts from the checkpoint it was given (StartReading);
//     its first write may set the row below what an earlier holding's late writes left there,
//     which is the one documented reset (records delivered again, never skipped);
//   - no record skipped: a reader starts, and a checkpoint is written, at or below the highest
//     record a reader of the shard asked to checkpoint (handed out and acknowledged);
//   - a child shard is read only once each of its parents' rows says SHARD_END.
//
// and, at the end of a run that ended with a quiet spell, to its goals (reported apart, since
// they are no safety promise): every readable shard is read by a live instance, and each
// crashed instance's shards are read again within TTL + 2 s of its crash.
//
// Nothing here starts a goroutine or reads a clock: a run is a function of its seed, and its
// event log's hash says so. The seed feeds one math/rand/v2 PCG source, which draws every
// latency (and so the order answers arrive in), fault, host clock and incarnation, and which the
// machines get (NewCore's choose) for every random choice they make; the Machine itself
// draws nothing of its own.
package protosim
