// Package protocol is kinesub's lease protocol (protocol 2, docs/leases.md) as a state machine
// with no I/O: a Machine takes one Input at a time, with the instant it happens, and returns
// what to do (Outputs): store operations to send, shards to start or stop reading, the next
// instant it wants to be stepped at. It starts no goroutine, reads no clock, draws no random
// number of its own and takes no context, so a single-threaded simulator replays a run exactly
// from its seed, and a search can explore every order of answers and ticks of a small fleet
// (Machine.Clone, Machine.String): package protosim does both. Tests hold it to that
// (purity_test.go).
//
// An interpreter performs each operation against the lease store and feeds the answer back as
// an Answered input. Today protosim is the Machine's only interpreter: the runtime (the root
// package) calls the core's pure pieces and performs the rest itself (below). docs/leases.md,
// "The protocol as a state machine, checked step by step", walks the safety argument through
// the Machine's functions.
//
// # What the core decides
//
// The pure pieces the runtime calls today:
//
//   - the timing rules, each once (timing.go): HandOutFor (2/3 TTL), StealWait and ReapAfter
//     (3/4 TTL), SilentAfter (TTL/2), RenewEvery (TTL/3), ClaimTick, WatchedPeers;
//   - the balance planner (balance.go, balance_load.go): what to take, hand back and steal
//     from one read of the lease table, by count or by load;
//   - the deadline's arithmetic (Deadline): until when records may be handed out, from the
//     renewals and confirmations, and that once passed it stays put until every shard was lost;
//   - what was seen of the peers' heartbeat rows (Peers): when a counter first stood still,
//     who is live, which owners are overlooked by restarted watchers, when the next row is due
//     to be taken over, who looks silent;
//   - the pending leases' notes (PendingNotes): when a change-row move is known to follow a
//     pending holding's write, and when to move the row for a silent thief;
//   - a claim round's decisions (round.go), which the Machine makes through the same functions:
//     which shards wait for a parent (BlockingParent), whether a listed lease shows a held
//     shard lost (ShowsLoss), the verdict on a peer's heartbeat row (Judge: live, silent, to be
//     taken over, gone) and on a takeover read back (ReapReadBack), the leases as the planner
//     sees them (Planned, OrphanClock, Peers.Beats), which of its own leases to take up or
//     release (Reconcile), how to take a lease (HowToTake) and whether a take's write made the
//     holding read back (TakeLanded).
//
// And the whole protocol composed from them, as a Machine (machine*.go): joining (a write that
// creates the heartbeat row only where it is absent, read back), renewing it every TTL/3 by a
// Steal at its own counter, confirming the leases by reads of the change row, both deadlines,
// claim rounds (the change row read, then the stream listed; owners whose rows the listing
// lacks read; the shards held checked against the listing; its own leases taken up; free leases
// and stopped owners' taken up to the share; hand-backs and a steal for balance), reaping a
// stopped owner (the next two live owners watched, a row taken over once its counter stood
// still for ReapAfter, released and deleted), pending leases (written with PendingTTL, the
// change row moved, bound StealWait after a move known to follow), ordered checkpoints
// (numbered within a holding; once SHARD_END is sent, every later write says so), hand-backs
// and Close (each lease released after its last checkpoint, the deadline resigned, the
// heartbeat row released and deleted), and losing every shard when the deadline passes or the
// heartbeat row is found taken over (then Rejoin asks for a Join under a new incarnation).
// Every operation carries a fresh OpID; answers may come in any order, and a write answered
// Unknown is taken as maybe applied, now or later: the Machine reads the row back before it
// acts on it (a take, a bind, a renewal, a reap), and reads a shard only under a holding its
// own write made, above every counter it read under before.
//
// # What the runtime still decides
//
// The runtime does not run a Machine yet: it calls the pieces above and keeps, itself, the
// order of its goroutines (the coordinator's claim rounds, the tenure keeper's renewals and
// confirmations, each shard's life), its timers and atomics (the hand-out check reads one
// atomic), its retries and backoff, the guard against other lease protocols, the cleanup of
// rows nobody needs, the victim notes written on pending leases, the loads noted on heartbeat
// rows, the shard listing and parent gating, and everything about reading, delivering and
// checkpointing records.
//
// # Not yet modelled by the Machine
//
//   - Balancing by load: the Machine balances by count (BalanceIn.Load is nil); no load is
//     noted on the heartbeat row (its renewal is a plain Steal).
//   - Victim notes (lease.Store.StealNote): a pending steal notes nothing, and a pending lease whose
//     victim stopped is waited for like any other.
//   - The guard against other lease protocols (ErrIncompatibleLeaseTable) and the protocol
//     mark row; the cleanup of finished shards' rows trimmed from the listing.
//   - The fold of concurrent change-row bumps into one: each bump is its own read and write.
//   - Timeouts: an operation's answer is whatever the interpreter reports (Unknown for a
//     timeout); the Machine never gives up on one by itself. The hand-back's drain bound (2 s)
//     is the interpreter's: it answers StopReading with ReaderStopped when done.
//   - Backoff: a failed bind is tried again a claim tick later; a failed bump announcing a
//     steal is tried again at once.
//   - A watched row due for its read counts as live for the claim tick that reads it, and is
//     judged when the answer comes (the runtime reads it, then judges it, in one pass).
//   - A reader that stops by itself before the shard's end gives the shard up with no write
//     (the runtime's reader stops only at the end, or when told).
package protocol
