package kinesub

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/internal/sim"
	"github.com/gostream/kinesub/lease"
)

// The fleet simulation's effect runs: the fleet of TestSimulation (sim_test.go), its
// consumers applying each record's effect through a model of dynamosink (sim.Sink: marks per
// shard and key, lease-table fencing, epochs, skips and redrives), which keeps the ledger of
// effects applied. The promise checked: every record's effect is applied exactly once in the
// latest epoch, unless the user skipped it for good (a dead letter left parked). Each run
// kind brings one situation the promise must survive, besides the seed's faults:
//
//   - ehk: records put with random explicit hash keys, so that each key is in every open
//     shard at once;
//   - misrouted: after a split, records put as KPL aggregates made for the parent (a
//     producer's stale shard map), each stored in one child with user records of both; the
//     producer puts those outside the child's range again on their own, as the KPL does, and
//     the readers drop them from the aggregate;
//   - deadletter: about one record in 16 fails its handler every time: Process dead-letters it
//     after 3 attempts through the sink's DeadLetter (the other consumers skip it at once);
//     once the fleet settled, two in three parked records are redriven, the others left;
//   - epoch: midway, the fleet is stopped, every checkpoint set to the stream's start (an
//     operator's rewind, which a crash cannot undo as it can a subscriber's own Seek or
//     WithStartAt before a checkpoint is written) and the fleet started again in a new epoch,
//     which its sink gives every record (WithEpoch): every record's effect is owed once more;
//   - leasetable: midway, the fleet is stopped and started again on a new, empty lease table
//     under a new name for the sink (WithLeaseTable): lease counters start afresh, records are
//     read again from the start and must be answered as replays, and nothing may stall.
//
// The seeds take the kinds in turn (seed n runs kind n mod 5), so that -sim.seeds costs what
// it costs TestSimulation; -sim.effects=kind runs one kind on every seed. -sim.plant plants a
// fault in the model that the checks must catch.

var (
	simEffectKinds = flag.String("sim.effects", "ehk,misrouted,deadletter,epoch,leasetable", "TestSimulationEffects: the effect runs, comma-separated (ehk, misrouted, deadletter, epoch, leasetable): seed n of -sim.seeds from -sim.first runs the (n mod count)th, -sim.seed each")
	simPlant       = flag.String("sim.plant", "", "TestSimulationEffects: faults to plant in the modelled sink, which the checks must catch: perkey (marks per key, not per shard and key), noredrive, noepoch, crosstables (lease counters compared across lease tables)")
)

func TestSimulationEffects(t *testing.T) {
	kinds := strings.Split(*simEffectKinds, ",")
	for _, k := range kinds {
		if !slices.Contains([]string{"ehk", "misrouted", "deadletter", "epoch", "leasetable"}, k) {
			t.Fatalf("-sim.effects: unknown run %q", k)
		}
	}
	var seeds []uint64
	if *simSeed != 0 {
		seeds = []uint64{*simSeed}
	} else {
		for i := range uint64(*simSeeds) {
			seeds = append(seeds, *simFirst+i)
		}
	}
	sums := make([]simEffectSums, len(kinds))
	t.Cleanup(func() {
		for i, k := range kinds {
			s := &sums[i]
			t.Logf("%s: %d runs, %d failed%s; %d records put, sink: %d applied, %d replays, %d superseded, %d out of order; %d dead-lettered, %d redriven, %d left; %d misrouted aggregates, %d user records put again on their shard",
				k, s.runs, len(s.failed), strings.Join(append([]string{""}, s.failed...), " seed "), s.put, s.Applied, s.Replays, s.Superseded, s.OutOfOrder,
				s.parked, s.Redriven, s.Left, s.aggregates, s.reput)
		}
	})
	for i, kind := range kinds {
		for _, seed := range seeds {
			if len(seeds) > 1 && seed%uint64(len(kinds)) != uint64(i) {
				continue // the seeds take the kinds in turn
			}
			t.Run(fmt.Sprintf("%s/seed=%d", kind, seed), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					fx := newSimEffects(kind)
					runFleet(t, seed, *simStrict, fx)
					sums[i].add(fx, seed, t.Failed())
					if t.Failed() {
						t.Logf("replay: go test -run 'TestSimulationEffects/%s/seed=%d$' -sim.effects=%s -sim.seed=%d -sim.log -v .", kind, seed, kind, seed)
					}
				})
			})
		}
	}
}

// simEffects is an effect run's sink model, its dead letters and its event.
type simEffects struct {
	kind string
	sink *sim.Sink

	// Set by the run's event, which holds every slot's mu; read by starts, under their slot's.
	epoch  int64  // the sink's epoch for records read by runs started from now on
	leases string // the lease table's name the sink compares holdings within

	mu         sync.Mutex
	parked     []sim.SinkRecord // dead letters, in the order parked
	parkedIDs  map[string]bool
	aggregates int // aggregates put for the parent of a split (misrouted)
	reput      int // their user records put again on the shard they belong to
	put        int
}

var errSimPoison = fmt.Errorf("sim: the handler fails on this record every time")

func newSimEffects(kind string) *simEffects {
	fx := &simEffects{kind: kind, sink: sim.NewSink(), leases: "leases-1", parkedIDs: map[string]bool{}}
	for _, p := range strings.Split(*simPlant, ",") {
		switch p {
		case "perkey":
			fx.sink.PerKeyMarks = true
		case "noredrive":
			fx.sink.NoRedrive = true
		case "noepoch":
			fx.sink.IgnoreEpoch = true
		case "crosstables":
			fx.sink.CountersAcrossTables = true
		}
	}
	return fx
}

// hashOf is a record id's hash, for choices that must not depend on the schedule.
func hashOf(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// poison reports whether record id fails its handler every time (deadletter).
func (fx *simEffects) poison(id string) bool { return fx.kind == "deadletter" && hashOf(id)%16 == 0 }

func (fx *simEffects) record(r *simRun, m *Message) sim.SinkRecord {
	return sim.SinkRecord{ID: string(m.Data()), Shard: m.ShardID(), Key: m.PartitionKey(),
		At:    lease.Checkpoint{Sequence: m.SequenceNumber(), SubSequence: int64(m.SubSequenceNumber())},
		Epoch: r.epoch, Leases: r.leases, Tenure: m.Tenure()}
}

// apply applies a record handed out by Messages, All or Batches, and reports whether to leave
// it unsettled (a later holding of its shard wrote its key's mark). A record its handler fails
// on, or that the sink answers as skipped and passed, the consumer dead-letters at once.
func (fx *simEffects) apply(r *simRun, m *Message) (leave bool) {
	rec := fx.record(r, m)
	if fx.poison(rec.ID) {
		fx.deadLetter(rec)
		return false
	}
	switch fx.sink.Apply(rec) {
	case sim.SinkSuperseded:
		return true
	case sim.SinkOutOfOrder:
		fx.deadLetter(rec)
	}
	return false
}

// handle is a Process handler's call of the sink, as dynamosink's Handler makes it: nil for
// an effect applied or a replay, the refusal otherwise, for Process to try again.
func (fx *simEffects) handle(r *simRun, m *Message) error {
	rec := fx.record(r, m)
	if fx.poison(rec.ID) {
		return errSimPoison
	}
	switch fx.sink.Apply(rec) {
	case sim.SinkSuperseded:
		return errSimSuperseded
	case sim.SinkOutOfOrder:
		return fmt.Errorf("sim: %s skipped and passed", rec.ID)
	}
	return nil
}

// processOptions are Process's options for run r: in deadletter runs, 3 attempts, then the
// sink's DeadLetter.
func (fx *simEffects) processOptions(r *simRun) []ProcessOption {
	if fx.kind != "deadletter" {
		return nil
	}
	return []ProcessOption{WithMaxAttempts(3), WithDeadLetter(func(_ context.Context, m *Message, _ error) error {
		if !r.gate.Dead() {
			fx.deadLetter(fx.record(r, m))
		}
		return nil
	})}
}

// heldBound is the most run r's Process may hold of a shard: its in-flight cap and its workers,
// as in every run. In misrouted runs, the cap counts Kinesis records as the reader asks for
// them (at most the room left), and each aggregate fetched brings 4 user records.
func (fx *simEffects) heldBound(r *simRun) int {
	if fx.kind == "misrouted" {
		return 4*r.maxInFlight + simConcurrency
	}
	return r.maxInFlight + simConcurrency
}

// deadLetter is dynamosink's DeadLetter: the record is recorded as skipped and parked, unless
// the sink applied it already.
func (fx *simEffects) deadLetter(rec sim.SinkRecord) {
	if fx.sink.Skip(rec) != sim.SinkApplied {
		return
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.parked = append(fx.parked, rec)
	fx.parkedIDs[rec.ID] = true
}

// redrive, once the fleet settled, redrives two in three of the parked records and leaves the
// others parked for good.
func (fx *simEffects) redrive(f *simFleet) {
	fx.mu.Lock()
	parked := slices.Clone(fx.parked)
	fx.mu.Unlock()
	for _, rec := range parked {
		if hashOf(rec.ID)%3 == 0 {
			fx.sink.Left(rec.ID)
			continue
		}
		if a := fx.sink.Redrive(rec); a != sim.SinkApplied {
			f.logf("redrive of %s (%s at %s/%d): %v", rec.ID, rec.Shard, rec.At.Sequence, rec.At.SubSequence, a)
		}
	}
}

// owed returns the records whose effect is owed and not parked.
func (fx *simEffects) owed() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	var out []string
	for _, id := range fx.sink.Unapplied() {
		if !fx.parkedIDs[id] {
			out = append(out, id)
		}
	}
	return out
}

func (fx *simEffects) unapplied() []string {
	u := fx.sink.Unapplied()
	if len(u) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d records' effects never applied in the latest epoch, nor skipped for good: %s", len(u), strings.Join(u[:min(10, len(u))], " "))}
}

// nextRecord draws the next record's id and key, as simFleet.produce does.
func (f *simFleet) nextRecord(keys *rand.Rand) (id, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id = fmt.Sprintf("r%05d", f.next)
	f.next++
	return id, fmt.Sprintf("k%d", keys.IntN(32))
}

// produce puts records over d, two every 100ms over 32 keys as simFleet.produce does, in the
// run kind's way, and runs the kind's event after two fifths of d.
func (fx *simEffects) produce(f *simFleet, d time.Duration) {
	keys := rand.New(rand.NewPCG(f.seed, 0x2545f4914f6cdd1d))
	hashes := rand.New(rand.NewPCG(f.seed, 0x51ed27f3a9c4e1d7))
	cl := kinesis.NewFromConfig(f.srv.Config(), func(o *kinesis.Options) { o.Credentials = aws.AnonymousCredentials{} })
	ctx := context.Background()
	start := time.Now()
	end := start.Add(d)
	var parent *simHashRange // misrouted: the shard split, whose range aggregates are made for
	evented := false
	for tick := 0; time.Now().Before(end); tick++ {
		if !evented && time.Since(start) >= 2*d/5 {
			evented = true
			parent = fx.event(f, cl)
		}
		if parent != nil && tick%3 == 0 {
			fx.putMisrouted(f, cl, keys, hashes, *parent)
		} else {
			for range 2 {
				id, key := f.nextRecord(keys)
				fx.owe(f, id, key)
				var err error
				if fx.kind == "ehk" {
					_, err = cl.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(f.stream), PartitionKey: aws.String(key),
						ExplicitHashKey: aws.String(simFullRange.draw(hashes).String()), Data: []byte(id)})
				} else {
					_, err = f.srv.Put(ctx, f.stream, key, []byte(id))
				}
				if err != nil {
					f.t.Errorf("put %s: %v", id, err)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// owe registers a record before a reader can see it.
func (fx *simEffects) owe(f *simFleet, id, key string) {
	f.check.Put(id, key)
	fx.sink.Put(id, key)
	fx.mu.Lock()
	fx.put++
	fx.mu.Unlock()
}

// simHashRange is a shard's hash-key range, both ends included.
type simHashRange struct{ start, end *big.Int }

var simFullRange = simHashRange{big.NewInt(0), new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))}

func (h simHashRange) holds(k *big.Int) bool { return h.start.Cmp(k) <= 0 && k.Cmp(h.end) <= 0 }

// draw returns a hash key of h at random.
func (h simHashRange) draw(rng *rand.Rand) *big.Int {
	x := new(big.Int).SetUint64(rng.Uint64())
	x.Lsh(x, 64).Or(x, new(big.Int).SetUint64(rng.Uint64()))
	width := new(big.Int).Sub(h.end, h.start)
	width.Add(width, big.NewInt(1))
	return x.Mod(x, width).Add(x, h.start)
}

// simShards lists the stream's shards and their ranges, and which are open.
func simShards(ctx context.Context, cl *kinesis.Client, stream string) (ranges map[string]simHashRange, open []string, err error) {
	ranges = map[string]simHashRange{}
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := cl.ListShards(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		for _, sh := range out.Shards {
			a, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
			b, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
			ranges[aws.ToString(sh.ShardId)] = simHashRange{a, b}
			if sh.SequenceNumberRange.EndingSequenceNumber == nil {
				open = append(open, aws.ToString(sh.ShardId))
			}
		}
		if out.NextToken == nil {
			return ranges, open, nil
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// event runs the kind's event; for misrouted, it returns the range of the shard it split.
func (fx *simEffects) event(f *simFleet, cl *kinesis.Client) *simHashRange {
	switch fx.kind {
	case "misrouted":
		return fx.split(f, cl)
	case "epoch":
		f.logf("the fleet stops, and starts again from the stream's start in epoch %d", fx.epoch+1)
		fx.restartFleet(f, func() {
			f.table.Settle() // the late writes of the stopped runs land first
			n := f.table.ResetCheckpoints(f.stream+"/", lease.Checkpoint{Sequence: lease.TrimHorizon})
			f.logf("%d checkpoints set to the stream's start", n)
			fx.epoch++
			fx.sink.Raise(fx.epoch)
		})
	case "leasetable":
		f.logf("the fleet stops, and starts again on a new lease table")
		fx.restartFleet(f, func() {
			old := f.table
			old.Settle() // the late writes of the stopped runs land in the old table
			nt := sim.NewTable()
			nt.Applied = old.Applied
			f.mu.Lock()
			f.table = nt
			f.mu.Unlock()
			f.check.NewLeaseTable()
			fx.leases = "leases-2"
		})
	}
	return nil
}

// split splits the open shard with the widest range at its middle, trying again while the
// stream is being resharded.
func (fx *simEffects) split(f *simFleet, cl *kinesis.Client) *simHashRange {
	ctx := context.Background()
	for range 20 {
		ranges, open, err := simShards(ctx, cl, f.stream)
		if err == nil && len(open) > 0 {
			widest := open[0]
			for _, id := range open {
				if w, b := new(big.Int).Sub(ranges[id].end, ranges[id].start), new(big.Int).Sub(ranges[widest].end, ranges[widest].start); w.Cmp(b) > 0 {
					widest = id
				}
			}
			h := ranges[widest]
			mid := new(big.Int).Add(h.start, h.end)
			mid.Add(mid, big.NewInt(1)).Rsh(mid, 1)
			_, err = cl.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(f.stream), ShardToSplit: aws.String(widest),
				NewStartingHashKey: aws.String(mid.String())})
			if err == nil {
				f.logf("split %s at %s: aggregates made for it from now on", widest, mid)
				return &h
			}
		}
		time.Sleep(time.Second)
	}
	f.t.Errorf("misrouted: no shard could be split")
	return nil
}

// putMisrouted puts an aggregate of 4 records made for the split shard parent, under the
// first's explicit hash key, and puts again on its own each of its user records that the
// shard it was stored in does not hold, as the KPL does with an aggregate that went to
// another shard than it predicted.
func (fx *simEffects) putMisrouted(f *simFleet, cl *kinesis.Client, keys, hashes *rand.Rand, parent simHashRange) {
	ctx := context.Background()
	subs := make([]kpl.Record, 4)
	for i := range subs {
		id, key := f.nextRecord(keys)
		fx.owe(f, id, key)
		subs[i] = kpl.Record{PartitionKey: key, Data: []byte(id), ExplicitHashKey: parent.draw(hashes).String()}
	}
	out, err := cl.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(f.stream), PartitionKey: aws.String(subs[0].PartitionKey),
		ExplicitHashKey: aws.String(subs[0].ExplicitHashKey), Data: aggregateOf(subs...)})
	if err != nil {
		f.t.Errorf("put an aggregate: %v", err)
		return
	}
	ranges, _, err := simShards(ctx, cl, f.stream)
	if err != nil {
		f.t.Errorf("list shards: %v", err)
		return
	}
	stored := ranges[aws.ToString(out.ShardId)]
	fx.mu.Lock()
	fx.aggregates++
	fx.mu.Unlock()
	for _, s := range subs {
		if h, _ := new(big.Int).SetString(s.ExplicitHashKey, 10); stored.holds(h) {
			continue
		}
		if _, err := cl.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(f.stream), PartitionKey: aws.String(s.PartitionKey),
			ExplicitHashKey: aws.String(s.ExplicitHashKey), Data: s.Data}); err != nil {
			f.t.Errorf("put %s again: %v", s.Data, err)
			continue
		}
		fx.mu.Lock()
		fx.reput++
		fx.mu.Unlock()
	}
}

// restartFleet stops every running instance cleanly, makes change, and starts every slot
// again, holding every slot's mu throughout: no crash, close or restart of the fleet's own
// interleaves.
func (fx *simEffects) restartFleet(f *simFleet, change func()) {
	for _, in := range f.slots {
		in.mu.Lock()
	}
	defer func() {
		for _, in := range f.slots {
			in.mu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, in := range f.slots {
		r := in.cur
		if r == nil || in.over || r.gate.Dead() {
			continue // a crashed run does nothing more; its restart finds the slot taken
		}
		if err := r.sub.Close(ctx); err != nil {
			f.logf("%s: Close: %v", r.label, err)
		}
		r.stop()
		<-r.done
		f.mu.Lock()
		f.leftLocked(r)
		f.mu.Unlock()
	}
	change()
	for _, in := range f.slots {
		if !in.over {
			in.start()
		}
	}
}

// simEffectSums sums one kind's effect runs.
type simEffectSums struct {
	mu sync.Mutex
	sim.SinkStats
	runs, put, parked, aggregates, reput int
	failed                               []string
}

func (s *simEffectSums) add(fx *simEffects, seed uint64, failed bool) {
	st := fx.sink.Stats()
	fx.mu.Lock()
	parked, aggregates, reput, put := len(fx.parked), fx.aggregates, fx.reput, fx.put
	fx.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	s.put += put
	s.parked += parked
	s.aggregates += aggregates
	s.reput += reput
	s.Applied += st.Applied
	s.Replays += st.Replays
	s.Superseded += st.Superseded
	s.OutOfOrder += st.OutOfOrder
	s.Redriven += st.Redriven
	s.Left += st.Left
	if failed {
		s.failed = append(s.failed, fmt.Sprint(seed))
	}
}
