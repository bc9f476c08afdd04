package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/lease"
)

// The fleet section: one stream of many shards on kinesistest (a child process, so that only
// the client's CPU is counted) read by many instances in this process, sharing one in-memory
// lease store (lease.Memory: the lease table's own cost is measured by leasecost and
// leasewrites, not here).
var (
	fleetOn        = flag.Bool("fleet", true, "run the fleet section (many shards, many instances in one process)")
	fleetShards    = flag.Int("fleet-shards", 2000, "shards of the fleet stream (10,000 on a large machine)")
	fleetInstances = flag.Int("fleet-instances", 16, "instances of the fleet (50 on a large machine)")
	fleetTTL       = flag.Duration("fleet-ttl", 3*time.Second, "lease TTL of the fleet's instances")
	fleetPoll      = flag.Duration("fleet-poll", time.Second, "poll interval of the fleet's instances and of the bare loop")
	fleetBound     = flag.Duration("fleet-bound", 10*time.Minute, "how long the fleet may take to deliver everything and balance")
	fleetIdle      = flag.Duration("fleet-idle", 10*time.Second, "how long idle CPU is measured, for kinesub and for the bare loop")
	fleetProfile   = flag.String("fleet-cpuprofile", "", "write CPU profiles of the idle windows to this path with .kinesub and .bare appended, and of the takeover after the cut with .cut")
)

// cutStore is one instance's view of the shared memory store; once cut, every call fails, as
// when the instance's network to the table is gone.
type cutStore struct {
	*lease.Memory
	cut atomic.Bool
}

var errCut = errors.New("fleet: cut off the lease store")

func (s *cutStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.Acquire(ctx, key, owner, ttl)
}

func (s *cutStore) Steal(ctx context.Context, key, owner string, counter int64, ttl time.Duration) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.Steal(ctx, key, owner, counter, ttl)
}

func (s *cutStore) StealNote(ctx context.Context, key, owner string, counter int64, ttl time.Duration, note string) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.StealNote(ctx, key, owner, counter, ttl, note)
}

func (s *cutStore) Renew(ctx context.Context, key string, t lease.Tenure, ttl time.Duration) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.Renew(ctx, key, t, ttl)
}

func (s *cutStore) Checkpoint(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.Checkpoint(ctx, key, t, cp)
}

func (s *cutStore) CheckpointOrdered(ctx context.Context, key string, t lease.Tenure, cp lease.Checkpoint, n int64) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.CheckpointOrdered(ctx, key, t, cp, n)
}

func (s *cutStore) Read(ctx context.Context, key string) (lease.Lease, error) {
	if s.cut.Load() {
		return lease.Lease{}, errCut
	}
	return s.Memory.Read(ctx, key)
}

func (s *cutStore) Release(ctx context.Context, key string, t lease.Tenure) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.Release(ctx, key, t)
}

func (s *cutStore) Delete(ctx context.Context, key string, counter int64) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Memory.Delete(ctx, key, counter)
}

func (s *cutStore) List(ctx context.Context) ([]lease.Lease, error) {
	if s.cut.Load() {
		return nil, errCut
	}
	return s.Memory.List(ctx)
}

func (s *cutStore) ListPrefix(ctx context.Context, prefix string) ([]lease.Lease, error) {
	if s.cut.Load() {
		return nil, errCut
	}
	return s.Memory.ListPrefix(ctx, prefix)
}

// fleetMember is one instance of the fleet.
type fleetMember struct {
	owner   string
	sub     *kinesub.Subscriber
	store   *cutStore
	drained sync.WaitGroup
	closed  chan error // set once the instance is closing
	waited  bool       // wait has returned once
	err     error      // Close's result, once waited
}

// fleet tracks what every instance delivered and acknowledged.
type fleet struct {
	mu        sync.Mutex
	members   []*fleetMember
	delivered int
	acked     map[string]string // shard/sequence → owner that acknowledged it
	twice     int               // acknowledged records delivered again
	timing    bool              // note each delivery's latency in lat
	lat       []shardLatency    // from each record's arrival to its delivery, while timing
}

func (f *fleet) add(ctx context.Context, kc *kinesis.Client, stream, owner string, mem *lease.Memory) error {
	st := &cutStore{Memory: mem}
	sub, err := kinesub.Subscribe(ctx, kc, stream, kinesub.WithLeaseStore(st), kinesub.WithOwner(owner),
		kinesub.WithLeaseTTL(*fleetTTL), kinesub.WithPollInterval(*fleetPoll), kinesub.WithInitialPosition(kinesub.Horizon()))
	if err != nil {
		return err
	}
	m := &fleetMember{owner: owner, sub: sub, store: st}
	m.drained.Go(func() { // owned by the member: waited for after its Close
		for msg := range sub.Messages() {
			key := fmt.Sprintf("%s/%s/%d", msg.ShardID(), msg.SequenceNumber(), msg.SubSequenceNumber())
			f.mu.Lock()
			f.delivered++
			if f.timing {
				f.lat = append(f.lat, shardLatency{msg.ShardID(), time.Since(msg.ArrivalTime())})
			}
			if _, ok := f.acked[key]; ok {
				f.twice++
			}
			f.mu.Unlock()
			if msg.Ack(ctx) == nil {
				f.mu.Lock()
				f.acked[key] = owner
				f.mu.Unlock()
			}
		}
	})
	f.mu.Lock()
	f.members = append(f.members, m)
	f.mu.Unlock()
	return nil
}

// close closes m in the background; wait waits for it.
func (m *fleetMember) close(bound time.Duration) {
	m.closed = make(chan error, 1)
	go func() { // owned by the member: wait receives its result
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		m.closed <- m.sub.Close(ctx)
	}()
}

// wait waits for the Close that close began and for the drain; it may be called again.
func (m *fleetMember) wait() error {
	if !m.waited {
		m.err, m.waited = <-m.closed, true
		m.drained.Wait()
	}
	return m.err
}

// shardOwners returns each shard's owner in the store (holding or not), and the count per owner.
func shardOwners(ctx context.Context, mem *lease.Memory, stream string, shards []string) (map[string]string, map[string]int, error) {
	ls, err := mem.ListPrefix(ctx, stream+"/")
	if err != nil {
		return nil, nil, err
	}
	want := map[string]bool{}
	for _, id := range shards {
		want[stream+"/"+id] = true
	}
	owner, count := map[string]string{}, map[string]int{}
	for _, l := range ls {
		if want[l.Key] && l.Owner != "" {
			// The subscriber adds "#" and a random suffix to the owner it is given.
			o, _, _ := strings.Cut(l.Owner, "#")
			owner[l.Key[len(stream)+1:]] = o
			count[o]++
		}
	}
	return owner, count, nil
}

func fleetFigures() error {
	fmt.Printf("\n== Fleet: %d shards, %d instances in one process, kinesistest in a child process, memory lease store, TTL %v, polls every %v ==\n",
		*fleetShards, *fleetInstances, *fleetTTL, *fleetPoll)
	ctx := context.Background()
	child, err := startChildServer(false)
	if err != nil {
		return err
	}
	defer child.close()
	kc := child.client
	stream := fmt.Sprintf("kinesub-bench-fleet-%d", time.Now().UnixNano())
	if _, err := createStream(ctx, kc, stream, int32(*fleetShards)); err != nil {
		return err
	}
	defer deleteStream(kc, stream)
	var shards []string
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := kc.ListShards(ctx, in)
		if err != nil {
			return err
		}
		for _, sh := range out.Shards {
			shards = append(shards, aws.ToString(sh.ShardId))
		}
		if out.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	n := 2 * len(shards)
	if err := child.publish(stream, n, 0, 100, 500); err != nil {
		return err
	}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0, g0 := ms.HeapAlloc, runtime.NumGoroutine()
	mem := lease.NewMemory()
	f := &fleet{acked: map[string]string{}}
	defer func() {
		for _, m := range f.members {
			if m.closed == nil {
				m.close(time.Minute)
			}
		}
		for _, m := range f.members {
			_ = m.wait()
		}
	}()
	began := time.Now()
	for i := range *fleetInstances {
		if err := f.add(ctx, kc, stream, fmt.Sprintf("f%d", i), mem); err != nil {
			return err
		}
	}
	complete := time.Since(began) // the last instance's Subscribe returned
	balanceEvery := 2 * *fleetTTL // the default balance interval
	var allDelivered, even time.Duration
	var last string // the last count per owner, for the error
	deadline := began.Add(*fleetBound)
	for allDelivered == 0 || even == 0 {
		if time.Now().After(deadline) {
			f.mu.Lock()
			got := f.delivered
			f.mu.Unlock()
			return fmt.Errorf("not delivered and balanced in %v (%d of %d delivered, after %v; shards per owner %s)", *fleetBound, got, n, allDelivered, last)
		}
		time.Sleep(100 * time.Millisecond)
		f.mu.Lock()
		done := f.delivered >= n
		f.mu.Unlock()
		if done && allDelivered == 0 {
			allDelivered = time.Since(began)
		}
		if even == 0 {
			_, count, err := shardOwners(ctx, mem, stream, shards)
			if err != nil {
				return err
			}
			lo, hi, total := len(shards), 0, 0
			for _, m := range f.members {
				lo, hi, total = min(lo, count[m.owner]), max(hi, count[m.owner]), total+count[m.owner]
			}
			last = fmt.Sprint(count)
			if total == len(shards) && hi-lo <= 1 {
				even = time.Since(began)
			}
		}
	}
	fmt.Printf("  Subscribe → all %d records delivered: %v\n", n, allDelivered.Round(10*time.Millisecond))
	// The rounds count from the moment the fleet is complete: the instances subscribe one after
	// the other, which takes a while at 32.
	rounds := (even - complete).Seconds() / balanceEvery.Seconds()
	goal := "at 32 instances: -fleet-instances=32"
	if *fleetInstances >= 32 {
		goal = verdict(rounds <= 3)
	}
	fmt.Printf("  balanced by count within ±1: %v after the first Subscribe, %v after the last returned: %.1f balance rounds of %v (goal ≤ 3 rounds %s)\n",
		even.Round(10*time.Millisecond), (even - complete).Round(10*time.Millisecond), rounds, balanceEvery, goal)
	if err := fleetLoadFigure(ctx, kc); err != nil {
		return err
	}

	// Steady and idle: heap, goroutines, CPU, once every shard is quiet (WithIdlePollInterval).
	if err := f.untilQuiet(len(shards)); err != nil {
		return err
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapPer := float64(int64(ms.HeapAlloc)-int64(heap0)) / float64(len(shards))
	gPer := float64(runtime.NumGoroutine()-g0) / float64(len(shards))
	stop, err := startProfile(*fleetProfile, ".kinesub")
	if err != nil {
		return err
	}
	c0 := cpuTime()
	time.Sleep(*fleetIdle)
	stop()
	idle := float64((cpuTime() - c0).Nanoseconds()) / 1e3 / (float64(len(shards)) * fleetIdle.Seconds())
	fmt.Printf("  heap %.1f KiB and %.2f goroutines per shard\n", heapPer/1024, gPer)

	// The latency a quiet spell adds: one record per shard (on average) after the idle window,
	// when every shard is quiet, then as many again while the shards that had a record are not
	// quiet yet (those that had none still are: their records do not count).
	quietLat, err := f.latencies(child, stream, len(shards))
	if err != nil {
		return err
	}
	woken := map[string]bool{}
	var quiet, busy []time.Duration
	for _, l := range quietLat {
		woken[l.shard] = true
		quiet = append(quiet, l.d)
	}
	time.Sleep(3 * *fleetPoll)
	busyLat, err := f.latencies(child, stream, len(shards))
	if err != nil {
		return err
	}
	for _, l := range busyLat {
		if woken[l.shard] {
			busy = append(busy, l.d)
		}
	}
	n += 2 * len(shards)
	fmt.Printf("  arrival → delivery: the first record after a quiet spell (idle polls every %v, %d records) p50 %v, p99 %v, max %v; on shards polled every %v (%d records) p50 %v, p99 %v, max %v\n",
		2**fleetPoll, len(quiet), msDur(quantileDur(quiet, 0.5)), msDur(quantileDur(quiet, 0.99)), msDur(quantileDur(quiet, 1)),
		*fleetPoll, len(busy), msDur(quantileDur(busy, 0.5)), msDur(quantileDur(busy, 0.99)), msDur(quantileDur(busy, 1)))

	// Cut a quarter off the store: the time until each of their shards has a live owner.
	quarter := max(1, len(f.members)/4)
	cut := f.members[:quarter]
	owners0, _, err := shardOwners(ctx, mem, stream, shards)
	if err != nil {
		return err
	}
	cutOwners := map[string]bool{}
	for _, m := range cut {
		cutOwners[m.owner] = true
	}
	var orphans []string
	for id, o := range owners0 {
		if cutOwners[o] {
			orphans = append(orphans, id)
		}
	}
	stopCut, err := startProfile(*fleetProfile, ".cut")
	if err != nil {
		return err
	}
	stopCut = sync.OnceFunc(stopCut)
	defer stopCut()
	cutAt := time.Now()
	for _, m := range cut {
		m.store.cut.Store(true)
		m.close(5 * time.Second)
	}
	taken := map[string]time.Duration{}
	for len(taken) < len(orphans) {
		if time.Since(cutAt) > 5*time.Minute {
			return fmt.Errorf("after the cut, %d of %d shards not taken over in 5 minutes", len(orphans)-len(taken), len(orphans))
		}
		time.Sleep(20 * time.Millisecond)
		owners, _, err := shardOwners(ctx, mem, stream, shards)
		if err != nil {
			return err
		}
		for _, id := range orphans {
			if _, ok := taken[id]; !ok && owners[id] != "" && !cutOwners[owners[id]] {
				taken[id] = time.Since(cutAt)
			}
		}
	}
	stopCut()
	ds := slices.Collect(func(yield func(time.Duration) bool) {
		for _, d := range taken {
			if !yield(d) {
				return
			}
		}
	})
	p99 := quantileDur(ds, 0.99)
	fmt.Printf("  cut %d instances off the store: their %d shards taken over p50 %v, p99 %v, max %v (goal p99 ≤ TTL + 2 s = %v: %s)\n",
		quarter, len(orphans), msDur(quantileDur(ds, 0.5)), msDur(p99), msDur(quantileDur(ds, 1)),
		*fleetTTL+2*time.Second, verdict(p99 <= *fleetTTL+2*time.Second))
	for _, m := range cut {
		_ = m.wait()
	}

	// Close a quarter gracefully while records flow: acknowledged records delivered again.
	live := f.members[quarter:]
	closing := live[:max(1, len(f.members)/4)]
	// Records the cut instances acknowledged never reached the store: delivered again by design.
	f.mu.Lock()
	f.twice = 0
	for k, o := range f.acked {
		if cutOwners[o] {
			delete(f.acked, k)
		}
	}
	f.mu.Unlock()
	flowing := make(chan error, 1)
	go func() { flowing <- child.publish(stream, 4*len(shards), 20*time.Millisecond, 100, 100) }() // waited for below
	time.Sleep(2 * *fleetPoll)
	for _, m := range closing {
		m.close(time.Minute)
	}
	for _, m := range closing {
		if err := m.wait(); err != nil {
			fmt.Printf("  close %s: %v\n", m.owner, err)
		}
	}
	if err := <-flowing; err != nil {
		return err
	}
	want := n + 4*len(shards)
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		f.mu.Lock()
		got := len(f.acked)
		f.mu.Unlock()
		if got >= want || time.Now().After(end) {
			break
		}
	}
	f.mu.Lock()
	twice, ackedN := f.twice, len(f.acked)
	f.mu.Unlock()
	fmt.Printf("  closed %d instances gracefully while publishing: %d of %d acknowledged records delivered twice (goal 0: %s)\n",
		len(closing), twice, ackedN, verdict(twice == 0))

	// The bare loop over the same shards, idle, after the fleet is closed.
	for _, m := range f.members {
		if m.closed == nil {
			m.close(time.Minute)
		}
	}
	for _, m := range f.members {
		_ = m.wait()
	}
	bare, err := bareIdleCPU(ctx, kc, stream, shards)
	if err != nil {
		return err
	}
	fmt.Printf("  idle CPU per shard-second: kinesub %.1f µs, bare SDK GetRecords loop %.1f µs: %.2f× (goal ≤ 0.5×: %s)\n",
		idle, bare, idle/bare, verdict(idle/bare <= 0.5))
	return nil
}

// bareIdleCPU polls every shard from its latest position every poll interval, one goroutine
// per shard, for the idle window, and returns the CPU per shard-second in µs.
func bareIdleCPU(ctx context.Context, kc *kinesis.Client, stream string, shards []string) (float64, error) {
	its := make([]*string, len(shards))
	for i, id := range shards {
		out, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
			ShardId: aws.String(id), ShardIteratorType: types.ShardIteratorTypeLatest})
		if err != nil {
			return 0, err
		}
		its[i] = out.ShardIterator
	}
	stop, err := startProfile(*fleetProfile, ".bare")
	if err != nil {
		return 0, err
	}
	defer stop()
	c0 := cpuTime()
	end := time.Now().Add(*fleetIdle)
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range shards {
		wg.Go(func() { // owned by bareIdleCPU
			it := its[i]
			for time.Now().Before(end) && it != nil {
				out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it})
				if err != nil {
					failed.Store(err)
					return
				}
				it = out.NextShardIterator
				time.Sleep(*fleetPoll)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64((cpuTime() - c0).Nanoseconds()) / 1e3 / (float64(len(shards)) * fleetIdle.Seconds()), nil
}

// startProfile starts a CPU profile written to path+suffix, or nothing when path is empty; the
// function it returns stops it.
func startProfile(path, suffix string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path + suffix)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// shardLatency is the time from a record's arrival to its delivery, and its shard.
type shardLatency struct {
	shard string
	d     time.Duration
}

// latencies publishes n records and returns, once each is delivered, the time from each one's
// arrival to its delivery.
func (f *fleet) latencies(child *childServer, stream string, n int) ([]shardLatency, error) {
	f.mu.Lock()
	f.timing, f.lat = true, nil
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.timing = false
		f.mu.Unlock()
	}()
	if err := child.publish(stream, n, 0, 100, 500); err != nil {
		return nil, err
	}
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		f.mu.Lock()
		got := slices.Clone(f.lat)
		f.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		if time.Now().After(end) {
			return nil, fmt.Errorf("%d of %d records delivered in a minute", len(got), n)
		}
	}
}

// untilQuiet waits until the fleet reads n shards, each of them quiet.
func (f *fleet) untilQuiet(n int) error {
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		quiet := 0
		for _, m := range f.members {
			for _, st := range m.sub.Shards() {
				if st.State == kinesub.ShardReading && st.Quiet {
					quiet++
				}
			}
		}
		if quiet >= n {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%d of %d shards quiet after 2 minutes", quiet, n)
		}
	}
}
