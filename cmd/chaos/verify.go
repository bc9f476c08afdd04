package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gostream/kinesub/cmd/chaos/internal/chaoslog"
	"github.com/gostream/kinesub/lease"
)

// Report is what a chaos run found.
type Report struct {
	Seed         uint64
	Dir          string
	Published    int // measured records
	Warmups      int // records published so that every shard has a checkpoint first
	Incarnations int
	Delivered    int // deliveries of measured records, duplicates included
	Lost         int // measured records never delivered
	Duplicated   int // deliveries beyond the first of a record
	DupAfterKill int // redelivered after the first reader was killed
	DupAfterLoss int // delivered twice around a lease taken over (balance steal) from a live reader
	// DupAfterRelease counts, with Process, records handled again past the checkpoint of a
	// clean release: a hand-back or Close gives back the records not started, the checkpoint
	// stops at the first of them, and those handled after it are replayed by the next reader.
	DupAfterRelease int
	Steals          int
	Takeovers       []time.Duration // kill → another owner takes each shard the killed one held
	MaxOverlap      time.Duration   // longest time two processes delivered from one shard at once
	Deploy          *DeployFigures  // a run of rolling deploys; nil for a run of kills
	Effects         *EffectFigures  // a run with Config.Effects; nil otherwise
	Wall            time.Duration
	Violations      []string
}

// MaxTakeover returns the longest takeover after a kill.
func (r *Report) MaxTakeover() time.Duration {
	if len(r.Takeovers) == 0 {
		return 0
	}
	return slices.Max(r.Takeovers)
}

// MeanTakeover returns the mean takeover after a kill.
func (r *Report) MeanTakeover() time.Duration {
	if len(r.Takeovers) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range r.Takeovers {
		sum += d
	}
	return sum / time.Duration(len(r.Takeovers))
}

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "published:   %d records (+%d warm-up), %d consumer incarnations\n", r.Published, r.Warmups, r.Incarnations)
	fmt.Fprintf(&b, "delivered:   %d\n", r.Delivered)
	fmt.Fprintf(&b, "lost:        %d\n", r.Lost)
	fmt.Fprintf(&b, "duplicated:  %d (%d after a kill, %d after a lease was taken over, %d replayed past a released checkpoint; %d balance steals)\n",
		r.Duplicated, r.DupAfterKill, r.DupAfterLoss, r.DupAfterRelease, r.Steals)
	if r.Deploy != nil {
		b.WriteString(r.Deploy.String())
	} else {
		fmt.Fprintf(&b, "takeover:    max %v, mean %v over %d shards held by killed processes\n", r.MaxTakeover().Round(time.Millisecond), r.MeanTakeover().Round(time.Millisecond), len(r.Takeovers))
	}
	fmt.Fprintf(&b, "overlap:     max %v of two processes delivering one shard\n", r.MaxOverlap.Round(time.Millisecond))
	fmt.Fprintf(&b, "wall time:   %v (seed %d)\n", r.Wall.Round(time.Millisecond), r.Seed)
	if len(r.Violations) == 0 {
		b.WriteString("violations:  none\n")
	} else {
		fmt.Fprintf(&b, "violations:  %d (logs in %s)\n", len(r.Violations), r.Dir)
		for i, v := range r.Violations {
			if i == 30 {
				fmt.Fprintf(&b, "  … and %d more\n", len(r.Violations)-i)
				break
			}
			fmt.Fprintf(&b, "  - %s\n", v)
		}
	}
	return b.String()
}

type verifyInput struct {
	records, keys, shards int
	warmups               int
	maxTakeover           time.Duration // longest allowed from a kill until its shards are taken
	// process: the consumers ran Subscriber.Process, which handles a shard's records out of
	// sequence order across keys (see perKeyFirsts).
	process bool
	stream  string
	final   []lease.Lease
	kills   []killEvent
	deploys []deployWindow // rolling deploys: measured into Report.Deploy
	logs    []incarnation
}

type incarnation struct {
	owner  string
	path   string
	killed time.Time
}

// session is one lease tenure: an owner reading a shard from "lease taken" until the lease was
// lost, released, or the process died.
type session struct {
	owner, shard string
	checkpoint   string // where it resumed; "" opens at the tip
	taken        time.Time
	end          string // "lost", "released", "finished", "killed", "exit"
	endAt        time.Time
	deliveries   []delivery
	acked        map[string]time.Time // sequence → when its Ack returned
	closing      time.Time            // when its process began to Close, if it did during the tenure
}

type delivery struct {
	at      time.Time
	seq     string
	key     string
	counter int // -1 for warm-up records
	s       *session
}

type checkpointEvent struct {
	at    time.Time
	owner string
	seq   string
}

// seqLess compares decimal sequence numbers as integers.
func seqLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

func verify(in verifyInput) (*Report, error) {
	rep := &Report{Published: in.records, Incarnations: len(in.logs)}
	bad := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	var sessions []*session
	checkpoints := map[string][]checkpointEvent{} // by shard
	for _, inc := range in.logs {
		current := map[string]*session{} // by shard
		f, err := os.Open(inc.path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var last time.Time
		for sc.Scan() {
			l, err := chaoslog.Parse(sc.Text())
			if err != nil {
				// Only a line cut by kill -9 may be malformed, and only the last one.
				if inc.killed.IsZero() {
					bad("%s: %v", inc.owner, err)
				}
				continue
			}
			last = l.Time
			if l.Owner != inc.owner {
				bad("%s: line written by %s", inc.owner, l.Owner)
			}
			if l.Kind == chaoslog.Ack {
				// The tenure the record was delivered in, also when its release was logged
				// before the line of its last ack.
				if s := current[l.Shard]; s != nil {
					s.acked[l.Seq] = l.Time
				} else {
					bad("%s acked %s/%s without ever taking its lease", inc.owner, l.Shard, l.Seq)
				}
				continue
			}
			if l.Kind == chaoslog.Event {
				shard := l.Attrs["shard_id"]
				s := current[shard]
				switch l.Msg {
				case "closing":
					for _, s := range current {
						if s.end == "" {
							s.closing = l.Time
						}
					}
				case "lease taken":
					if s != nil && s.end == "" {
						bad("%s took %s at %v while already holding it", inc.owner, shard, l.Time.Format(time.StampMilli))
					}
					s = &session{owner: inc.owner, shard: shard, checkpoint: l.Attrs["checkpoint"], taken: l.Time, acked: map[string]time.Time{}}
					current[shard] = s
					sessions = append(sessions, s)
				case "lease lost", "lease released", "shard finished":
					if s == nil || s.end != "" {
						bad("%s: %q for %s without holding it", inc.owner, l.Msg, shard)
						continue
					}
					s.end, s.endAt = strings.TrimPrefix(strings.TrimPrefix(l.Msg, "lease "), "shard "), l.Time
				case "checkpoint":
					checkpoints[shard] = append(checkpoints[shard], checkpointEvent{at: l.Time, owner: inc.owner, seq: l.Attrs["sequence"]})
				case "lease taken over for balance":
					rep.Steals++
				}
				continue
			}
			s := current[l.Shard]
			if s == nil {
				bad("%s delivered %s/%s without ever taking its lease", inc.owner, l.Shard, l.Seq)
				continue
			}
			d := delivery{at: l.Time, seq: l.Seq, key: l.Key, counter: -1, s: s}
			if id, ok := recordID(l.Key, l.Payload, in.keys, in.records); ok {
				d.counter = id / in.keys
			} else if !strings.HasPrefix(l.Key, warmPrefix) {
				bad("%s delivered an unknown record %s/%s: key %q payload %q", inc.owner, l.Shard, l.Seq, l.Key, l.Payload)
			}
			s.deliveries = append(s.deliveries, d)
		}
		if err := sc.Err(); err != nil {
			f.Close()
			return nil, err
		}
		f.Close()
		for _, s := range current {
			if s.end != "" {
				continue
			}
			if !inc.killed.IsZero() {
				s.end, s.endAt = "killed", inc.killed
			} else {
				s.end, s.endAt = "exit", last
				bad("%s exited still holding %s", inc.owner, s.shard)
			}
		}
	}

	// Every shard's records in stream order, as delivered by anyone.
	byShard := map[string][]*session{}
	for _, s := range sessions {
		byShard[s.shard] = append(byShard[s.shard], s)
	}
	order := map[string][]string{}     // shard → distinct sequence numbers, ascending
	pos := map[string]map[string]int{} // shard → sequence → index in order
	delivered := make([]int, in.records)
	for shard, ss := range byShard {
		set := map[string]bool{}
		for _, s := range ss {
			for _, d := range s.deliveries {
				set[d.seq] = true
			}
		}
		seqs := make([]string, 0, len(set))
		for q := range set {
			seqs = append(seqs, q)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqLess(seqs[i], seqs[j]) })
		order[shard] = seqs
		pos[shard] = make(map[string]int, len(seqs))
		for i, q := range seqs {
			pos[shard][q] = i
		}
	}

	// Per session: it resumes right after its checkpoint and reads on without a gap (not with
	// Process, which handles keys out of their shard's order), and per key the counters go up by
	// one.
	for _, s := range sessions {
		seqs, idx := order[s.shard], pos[s.shard]
		next := -1
		if s.checkpoint != "" {
			next = sort.Search(len(seqs), func(i int) bool { return seqLess(s.checkpoint, seqs[i]) })
		}
		counters := map[string]int{}
		for i, d := range s.deliveries {
			at := idx[d.seq]
			if next >= 0 && at != next && !in.process {
				what := "skipped forward"
				if at < next {
					what = "went back"
				}
				if i == 0 {
					bad("%s on %s resumed at %s, not after its checkpoint %s (%s %d records)", s.owner, s.shard, d.seq, s.checkpoint, what, abs(at-next))
				} else {
					bad("%s on %s %s %d records at %s", s.owner, s.shard, what, abs(at-next), d.seq)
				}
			}
			next = at + 1
			if d.counter < 0 {
				continue
			}
			if c, ok := counters[d.key]; ok && d.counter != c+1 {
				bad("%s on %s: key %s went from counter %d to %d", s.owner, s.shard, d.key, c, d.counter)
			}
			counters[d.key] = d.counter
		}
	}

	// Per shard: the stream holds each key's records in publishing order, and no record twice.
	for shard, seqs := range order {
		rec := map[string]delivery{}
		for _, s := range byShard[shard] {
			for _, d := range s.deliveries {
				rec[d.seq] = d
			}
		}
		last := map[string]int{}
		for _, q := range seqs {
			d := rec[q]
			if d.counter < 0 {
				continue
			}
			if c, ok := last[d.key]; ok && d.counter <= c {
				bad("stream order: on %s key %s counter %d follows %d (published out of order or twice)", shard, d.key, d.counter, c)
			}
			last[d.key] = d.counter
			delivered[d.counter*in.keys+keyIndex(d.key)]++
		}
	}
	for id, n := range delivered {
		if n == 0 {
			rep.Lost++
			if rep.Lost <= 10 {
				bad("lost: %s/%d was never delivered", recordKey(id%in.keys), id/in.keys)
			}
		}
	}
	if rep.Lost > 10 {
		bad("lost: %d records in all", rep.Lost)
	}
	if in.process {
		perKeyFirsts(sessions, bad)
	}

	// Duplicates: each redelivery must follow a reader that stopped without checkpointing the
	// record (killed, or its lease taken over), or come from a reader whose lease was taken over
	// and that had not noticed yet.
	for shard, ss := range byShard {
		all := map[string][]delivery{}
		for _, s := range ss {
			for _, d := range s.deliveries {
				all[d.seq] = append(all[d.seq], d)
			}
		}
		for seq, ds := range all {
			if ds[0].counter >= 0 {
				rep.Delivered += len(ds)
			}
			if len(ds) == 1 {
				continue
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i].at.Before(ds[j].at) })
			for i := 1; i < len(ds); i++ {
				prev, d := ds[i-1], ds[i]
				if d.counter >= 0 {
					rep.Duplicated++
				}
				switch {
				case prev.s == d.s:
					bad("%s delivered %s/%s twice in one lease tenure", d.s.owner, shard, seq)
				case prev.s.end == "killed":
					if d.counter >= 0 {
						rep.DupAfterKill++
					}
				case prev.s.end == "lost":
					if d.counter >= 0 {
						rep.DupAfterLoss++
					}
				case d.s.end == "lost" && d.s.taken.Before(prev.s.taken):
					// The previous owner, not yet aware that its lease was taken over, read
					// the record after the new owner had: the overlap checked below.
					if d.counter >= 0 {
						rep.DupAfterLoss++
					}
				case in.process && prev.s.end == "released" && d.s.checkpoint != "" && seqLess(d.s.checkpoint, seq):
					// Process handles a shard's records out of order: what was handled past
					// the first record not started when the shard was released lies past the
					// checkpoint, and is replayed (docs/processing.md). Resuming at that
					// checkpoint is checked below; a record at or before it must not return.
					if d.counter >= 0 {
						rep.DupAfterRelease++
					}
				default:
					bad("%s/%s delivered by %s again by %s, though %s's tenure ended %q (checkpointed and released)", shard, seq, prev.s.owner, d.s.owner, prev.s.owner, prev.s.end)
				}
			}
		}
	}
	// A takeover must not resume before a checkpoint that was already written: the lease
	// store's checkpoint only moves forward. 100ms covers the lag between a write and its log
	// line.
	for _, s := range sessions {
		for _, c := range checkpoints[s.shard] {
			if c.at.Before(s.taken.Add(-100*time.Millisecond)) && seqLess(s.checkpoint, c.seq) {
				bad("%s took %s at checkpoint %q, but %s had written %s %v earlier", s.owner, s.shard, s.checkpoint, c.owner, c.seq, s.taken.Sub(c.at).Round(time.Millisecond))
				break
			}
		}
	}

	// No shard is delivered by two processes at once, not for a moment: a previous owner stops
	// handing records out before anyone else may read (docs/leases.md).
	for shard, ss := range byShard {
		for i, a := range ss {
			for _, b := range ss[i+1:] {
				if a.owner == b.owner || len(a.deliveries) == 0 || len(b.deliveries) == 0 {
					continue
				}
				from := maxTime(a.deliveries[0].at, b.deliveries[0].at)
				to := minTime(a.deliveries[len(a.deliveries)-1].at, b.deliveries[len(b.deliveries)-1].at)
				if o := to.Sub(from); o > 0 {
					rep.MaxOverlap = max(rep.MaxOverlap, o)
					if o > 0 {
						bad("%s and %s both delivered from %s for %v (from %s)", a.owner, b.owner, shard, o.Round(time.Millisecond), from.Format(time.StampMilli))
					}
				}
			}
		}
	}

	// Takeover after each kill: until another owner took each shard the killed one held.
	for _, k := range in.kills {
		for _, s := range sessions {
			if s.owner != k.owner || s.end != "killed" {
				continue
			}
			var next *session
			for _, t := range byShard[s.shard] {
				if t.owner != k.owner && t.taken.After(s.taken) && (next == nil || t.taken.Before(next.taken)) {
					next = t
				}
			}
			if next == nil {
				bad("%s held by %s when it was killed was never taken over", s.shard, k.owner)
				continue
			}
			if !next.taken.After(k.at) {
				continue // stolen before the kill; the killed process had not noticed yet
			}
			d := next.taken.Sub(k.at)
			rep.Takeovers = append(rep.Takeovers, d)
			if d > in.maxTakeover {
				bad("%s held by %s was taken over by %s %v after the kill, more than %v", s.shard, k.owner, next.owner, d.Round(time.Millisecond), in.maxTakeover)
			}
		}
	}

	// After the survivors closed, every lease is released at its shard's newest record.
	seenShards := 0
	for _, l := range in.final {
		shard, ok := shardOf(l.Key, in.stream)
		if !ok {
			continue
		}
		seenShards++
		if l.Owner != "" {
			bad("lease of %s still held by %s after every consumer stopped", shard, l.Owner)
		}
		if seqs := order[shard]; len(seqs) > 0 && l.Checkpoint.Sequence != seqs[len(seqs)-1] {
			bad("final checkpoint of %s is %q, not its newest record %s", shard, l.Checkpoint.Sequence, seqs[len(seqs)-1])
		}
	}
	if seenShards != in.shards {
		bad("%d leases in the table for %d shards", seenShards, in.shards)
	}
	if len(in.deploys) > 0 {
		rep.Deploy = deployFigures(in.deploys, byShard, checkpoints)
	}
	return rep, nil
}

// shardOf returns the shard whose lease has key, and whether key is a shard's lease of stream
// at all: not another stream's row, nor a heartbeat row (which a killed process leaves behind
// until a peer deletes it), the change row or the lease protocol's mark.
func shardOf(key, stream string) (string, bool) {
	id, ok := strings.CutPrefix(key, stream+"/")
	return id, ok && lease.KindOf(key) == lease.KindShard
}

func keyIndex(key string) int {
	var n int
	fmt.Sscanf(key, "k%d", &n)
	return n
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// perKeyFirsts checks Process's promise across every process and lease tenure: per partition
// key, no record was handled before the record before it was first handled. A handler logs its
// record first thing, so a record's first line is when it was first handled; all processes log
// with the same host's clock.
func perKeyFirsts(sessions []*session, bad func(string, ...any)) {
	first := map[string]map[int]time.Time{} // key → counter → first handled
	for _, s := range sessions {
		for _, d := range s.deliveries {
			if d.counter < 0 {
				continue
			}
			byCounter := first[d.key]
			if byCounter == nil {
				byCounter = map[int]time.Time{}
				first[d.key] = byCounter
			}
			if t, ok := byCounter[d.counter]; !ok || d.at.Before(t) {
				byCounter[d.counter] = d.at
			}
		}
	}
	reported := 0
	for key, byCounter := range first {
		for c, t := range byCounter {
			prev, ok := byCounter[c-1]
			if c == 0 || !ok || !t.Before(prev) {
				continue // a missing predecessor is counted as lost
			}
			if reported++; reported <= 10 {
				bad("key %s: record %d first handled at %s, before record %d (at %s)", key, c,
					t.Format(time.StampMicro), c-1, prev.Format(time.StampMicro))
			}
		}
	}
	if reported > 10 {
		bad("per-key order: %d records in all handled before their predecessor", reported)
	}
}
