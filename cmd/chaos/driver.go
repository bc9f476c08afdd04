package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gostream/kinesub"
	"github.com/gostream/kinesub/cmd/chaos/internal/chaoslog"
	"github.com/gostream/kinesub/lease"
)

// Config is one chaos run.
type Config struct {
	Records    int           // records to publish, spread over Keys partition keys
	Keys       int           // partition keys; each record's payload carries its key's counter
	Shards     int32         // shards of the stream
	Consumers  int           // consumer processes running at once
	Kills      int           // kill -9s while the records are published
	Rate       int           // records published per second
	TTL        time.Duration // lease TTL of the consumers
	Checkpoint time.Duration // checkpoint interval of the consumers
	Slack      time.Duration // allowed beyond the protocol's bound for a takeover after a kill (a busy machine's scheduling)
	Timeout    time.Duration // for every record to be logged after publishing ends
	Seed       uint64        // picks kill times and victims; 0 picks one at random
	Dir        string        // where logs and the consumer binary go; if empty, a temporary one, removed unless the run failed
	Race       bool          // build the consumer with the race detector
	// Process makes the consumers handle records with Subscriber.Process (64 handlers at once,
	// each taking up to 2ms) rather than a Messages loop: records of different keys are then
	// handled out of their shard's order, and the checks follow the per-key promise instead.
	Process bool
	// Deploys, when positive, makes the run a series of rolling deploys instead of kill -9s
	// (Kills must then be 0; see deploy.go): each restarts every consumer once, one at a time,
	// with SIGTERM and a new process once the old one exited, under a producer publishing Rate
	// records a second until the deploys are done (Records is then a cap).
	Deploys int
	// StartDelay is how long after an old process exited its replacement starts in a rolling
	// deploy (an orchestrator pulling an image, a slow start): 0 starts it at once, so it
	// usually claims the released shards itself; longer, the peers take them first and hand
	// them back when it joins.
	StartDelay time.Duration
	// Effects, when set (EffectsSink or EffectsPlain, see effects.go), makes the consumers
	// handle records with Process and apply each record's effect, a counter of its own in a
	// DynamoDB table, through dynamosink or with a plain UpdateItem; the report then counts the
	// effects applied more than once and never (Report.Effects).
	Effects string
	Logf    func(format string, args ...any)
}

// DefaultConfig is the run `go run ./cmd/chaos` does without flags.
func DefaultConfig() Config {
	return Config{
		Records:    100_000,
		Keys:       1000,
		Shards:     8,
		Consumers:  3,
		Kills:      5,
		Rate:       6000,
		TTL:        1500 * time.Millisecond,
		Checkpoint: 200 * time.Millisecond,
		Slack:      300 * time.Millisecond,
		Timeout:    2 * time.Minute,
	}
}

// proc is one incarnation of a consumer process.
type proc struct {
	owner   string
	log     string
	cmd     *exec.Cmd
	stderr  *os.File
	started time.Time
	killed  time.Time // zero unless killed with SIGKILL
	termed  bool      // sent SIGTERM
	done    chan struct{}
	err     error     // from Wait
	ended   time.Time // when Wait returned; set before done closes
}

// run is the state of one chaos run.
type run struct {
	cfg   Config
	kc    *kinesis.Client
	store *lease.DynamoDB
	dc    *dynamodb.Client
	rng   *mrand.Rand

	stream, table string
	suffix        string
	effects       string // effects table (Config.Effects)
	marks         string // dynamosink's mark table (Config.Effects)
	dir, bin      string

	mu    sync.Mutex
	procs []*proc // every incarnation, in start order
	live  []*proc // by slot
	incs  []int   // incarnations started per slot
}

// Run creates a stream and a lease table, starts the consumers, publishes while killing and
// restarting them, stops the survivors, and checks the consumers' logs. It returns an error
// when the run could not be carried out, and a Report listing any violation otherwise.
func Run(ctx context.Context, cfg Config, kc *kinesis.Client, dc *dynamodb.Client) (rep *Report, err error) {
	began := time.Now()
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Seed == 0 {
		cfg.Seed = mrand.Uint64()
	}
	if cfg.Effects != "" {
		cfg.Process = true // the effects are applied by Process handlers
	}
	r := &run{cfg: cfg, kc: kc, dc: dc, rng: mrand.New(mrand.NewPCG(cfg.Seed, 0))}
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	r.stream, r.table, r.suffix = "chaos-"+suffix, "chaos-leases-"+suffix, suffix
	r.dir = cfg.Dir
	if r.dir == "" {
		d, derr := os.MkdirTemp("", "kinesub-chaos-")
		if derr != nil {
			return nil, derr
		}
		r.dir = d
		// Keep the logs only when they show something to look at.
		defer func() {
			if err == nil && len(rep.Violations) == 0 {
				os.RemoveAll(d)
			}
		}()
	}
	cfg.Logf("chaos: seed %d, logs in %s", cfg.Seed, r.dir)
	if err := r.build(ctx); err != nil {
		return nil, err
	}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	defer r.teardown()
	defer r.killAll()

	if cfg.Deploys > 0 {
		rep, err = r.deploy(ctx)
	} else {
		rep, err = r.chaos(ctx)
	}
	if err != nil {
		return nil, err
	}
	rep.Seed = cfg.Seed
	rep.Dir = r.dir
	rep.Wall = time.Since(began)
	return rep, nil
}

// build compiles the consumer into the run's directory.
func (r *run) build(ctx context.Context) error {
	r.bin = filepath.Join(r.dir, "consumer")
	args := []string{"build", "-o", r.bin}
	if r.cfg.Race {
		args = append(args, "-race")
	}
	args = append(args, "github.com/gostream/kinesub/cmd/chaos/consumer")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.CommandContext(ctx, gobin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build consumer: %w\n%s", err, out.String())
	}
	r.cfg.Logf("chaos: consumer built in %v", time.Since(t).Round(time.Millisecond))
	return nil
}

func (r *run) setup(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := r.kc.CreateStream(cctx, &kinesis.CreateStreamInput{
		StreamName: aws.String(r.stream), ShardCount: aws.Int32(r.cfg.Shards),
		StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
	}); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	w := kinesis.NewStreamExistsWaiter(r.kc, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	if err := w.Wait(cctx, &kinesis.DescribeStreamInput{StreamName: aws.String(r.stream)}, 30*time.Second); err != nil {
		return fmt.Errorf("wait for stream: %w", err)
	}
	r.store = lease.NewDynamoDB(r.dc, r.table)
	if err := r.store.EnsureTable(cctx); err != nil {
		return fmt.Errorf("lease table: %w", err)
	}
	if r.cfg.Effects != "" {
		return r.effectTables(cctx)
	}
	return nil
}

func (r *run) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = r.kc.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(r.stream), EnforceConsumerDeletion: aws.Bool(true)})
	for _, t := range []string{r.table, r.effects, r.marks} {
		if t != "" {
			_, _ = r.dc.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(t)})
		}
	}
}

// start runs the next incarnation of slot. Each incarnation has its own owner name, so that
// its predecessor's leases are taken over only once they expire, as after a real crash.
func (r *run) start(slot int) (*proc, error) {
	r.mu.Lock()
	inc := r.incs[slot]
	r.incs[slot]++
	r.mu.Unlock()
	owner := fmt.Sprintf("c%d.%d", slot, inc)
	p := &proc{owner: owner, log: filepath.Join(r.dir, owner+".log"), done: make(chan struct{})}
	// The log exists from the start: a process killed before it opened its log read nothing.
	if err := os.WriteFile(p.log, nil, 0o644); err != nil {
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(r.dir, owner+".stderr"))
	if err != nil {
		return nil, err
	}
	p.stderr = stderr
	p.cmd = exec.Command(r.bin,
		"-stream", r.stream, "-table", r.table, "-owner", owner, "-log", p.log,
		"-ttl", r.cfg.TTL.String(), "-checkpoint", r.cfg.Checkpoint.String(),
		fmt.Sprintf("-process=%t", r.cfg.Process))
	if r.cfg.Effects != "" {
		p.cmd.Args = append(p.cmd.Args, "-effects", r.cfg.Effects, "-effects-table", r.effects, "-marks-table", r.marks)
	}
	p.cmd.Stdout, p.cmd.Stderr = stderr, stderr
	if r.cfg.Race {
		// The race runtime sleeps 1s at exit by default: a consumer would seem to take 1s
		// longer to stop, and a rolling deploy to start its replacement 1s late.
		p.cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	if err := p.cmd.Start(); err != nil {
		stderr.Close()
		return nil, fmt.Errorf("start %s: %w", owner, err)
	}
	p.started = time.Now()
	go func() { // owned by the run: every incarnation is waited for (kill, awaitExit, killAll)
		p.err = p.cmd.Wait()
		p.ended = time.Now()
		p.stderr.Close()
		close(p.done)
	}()
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.live[slot] = p
	r.mu.Unlock()
	r.cfg.Logf("chaos: started %s (pid %d)", owner, p.cmd.Process.Pid)
	return p, nil
}

// kill sends SIGKILL to slot's process and waits for it to die.
func (r *run) kill(slot int) *proc {
	r.mu.Lock()
	p := r.live[slot]
	r.mu.Unlock()
	p.killed = time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return p
}

// killAll ends whatever still runs, when the run stops early.
func (r *run) killAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

// exited reports incarnations that ended without being told to.
func (r *run) exited() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.procs {
		select {
		case <-p.done:
			if p.killed.IsZero() && !p.termed {
				out = append(out, fmt.Sprintf("%s exited on its own (%v): %s", p.owner, p.err, tail(filepath.Join(r.dir, p.owner+".stderr"))))
			}
		default:
		}
	}
	return out
}

func (r *run) chaos(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	pub, warmups, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	// Publish in the background, paced, while killing.
	pctx, cancelPub := context.WithCancel(ctx)
	var published sync.WaitGroup
	var pubErr error
	pubStart := time.Now()
	published.Go(func() { _, pubErr = r.publish(pctx, pub, pubStart, nil) })
	defer published.Wait()
	defer cancelPub() // on an early return: the publisher stops first
	window := time.Duration(float64(cfg.Records) / float64(cfg.Rate) * float64(time.Second))
	step := window / time.Duration(cfg.Kills+1)
	var kills []killEvent
	for k := range cfg.Kills {
		at := pubStart.Add(step*time.Duration(k+1) + time.Duration(r.rng.Int64N(int64(step/2))) - step/4)
		if err := sleepUntil(ctx, at); err != nil {
			return nil, err
		}
		if bad := r.exited(); len(bad) > 0 {
			return nil, errors.New(strings.Join(bad, "\n"))
		}
		slot := r.rng.IntN(cfg.Consumers)
		p := r.kill(slot)
		cfg.Logf("chaos: killed %s at +%v", p.owner, p.killed.Sub(pubStart).Round(time.Millisecond))
		kills = append(kills, killEvent{owner: p.owner, at: p.killed})
		if _, err := r.start(slot); err != nil {
			return nil, err
		}
	}
	if published.Wait(); pubErr != nil {
		return nil, fmt.Errorf("publish: %w", pubErr)
	}
	cfg.Logf("chaos: published %d records in %v", cfg.Records, time.Since(pubStart).Round(time.Millisecond))
	return r.finish(ctx, newTailer(cfg.Records, cfg.Keys), pubStart, verifyInput{records: cfg.Records, kills: kills, warmups: warmups})
}

// begin starts the consumers and makes sure every shard has a checkpoint; it returns the
// publisher of the measured records and the count of warm-up records.
func (r *run) begin(ctx context.Context) (*kinesub.Publisher, int, error) {
	cfg := r.cfg
	r.live = make([]*proc, cfg.Consumers)
	r.incs = make([]int, cfg.Consumers)
	for i := range cfg.Consumers {
		if _, err := r.start(i); err != nil {
			return nil, 0, err
		}
	}
	pub, err := kinesub.NewPublisher(r.kc, r.stream)
	if err != nil {
		return nil, 0, err
	}
	t := time.Now()
	warmups, err := r.warmUp(ctx, pub)
	if err != nil {
		return nil, 0, err
	}
	cfg.Logf("chaos: every shard has a checkpoint after %v (%d warm-up records)", time.Since(t).Round(time.Millisecond), warmups)
	return pub, warmups, nil
}

// finish waits until every one of the in.records measured records is in some log and no lease
// is held by a killed process, stops the running consumers as an orchestrator would, and checks
// the logs. in carries what the run did (records, kills, deploys); finish adds the rest.
func (r *run) finish(ctx context.Context, tl *tailer, pubStart time.Time, in verifyInput) (*Report, error) {
	cfg := r.cfg
	deadline := time.Now().Add(cfg.Timeout)
	var timedOut string
	for {
		seen := tl.poll(r.logPaths())
		stale, err := r.deadHolders(ctx)
		if err != nil {
			return nil, err
		}
		if seen == in.records && stale == 0 {
			cfg.Logf("chaos: every record logged %v after publishing began", time.Since(pubStart).Round(time.Millisecond))
			break
		}
		if bad := r.exited(); len(bad) > 0 {
			return nil, errors.New(strings.Join(bad, "\n"))
		}
		if time.Now().After(deadline) {
			timedOut = fmt.Sprintf("timed out after %v: %d of %d records logged, %d leases held by killed processes", cfg.Timeout, seen, in.records, stale)
			break
		}
		if err := sleepUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
			return nil, err
		}
	}

	if cfg.Effects != "" && timedOut == "" {
		if err := r.awaitEffects(ctx, deadline); err != nil {
			return nil, err
		}
	}
	// Stop the survivors as an orchestrator would: SIGTERM, so they release their leases.
	r.mu.Lock()
	live := append([]*proc(nil), r.live...)
	r.mu.Unlock()
	var violations []string
	if timedOut != "" {
		violations = append(violations, timedOut)
	}
	violations = append(violations, r.exited()...)
	termAt := time.Now()
	for _, p := range live {
		p.termed = true
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range live {
		if err := r.awaitExit(p); err != nil {
			violations = append(violations, err.Error())
		}
	}
	cfg.Logf("chaos: survivors stopped in %v", time.Since(termAt).Round(time.Millisecond))

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	final, err := r.store.List(cctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	r.mu.Lock()
	procs := append([]*proc(nil), r.procs...)
	r.mu.Unlock()
	in.keys, in.shards = cfg.Keys, int(cfg.Shards)
	in.stream, in.final = r.stream, final
	in.process = cfg.Process
	// Lease protocol 2 (docs/leases.md): a peer reads a killed owner's heartbeat row within
	// TTL/3, takes it over once its counter stood still for 3/4 TTL, and waits 3/4 TTL more for
	// a lease the killed owner was in the middle of stealing. Doubled for a taker killed in the
	// middle of its own takeover (the kills come every few seconds).
	in.maxTakeover = 2*(cfg.TTL/3+3*cfg.TTL/4+3*cfg.TTL/4) + cfg.Slack
	for _, p := range procs {
		in.logs = append(in.logs, incarnation{owner: p.owner, path: p.log, killed: p.killed})
	}
	rep, err := verify(in)
	if err != nil {
		return nil, err
	}
	rep.Warmups = in.warmups
	rep.Violations = append(violations, rep.Violations...)
	if cfg.Effects != "" {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rep.Effects, err = r.effectFigures(cctx)
		cancel()
		if err != nil {
			return nil, err
		}
		rep.Violations = append(rep.Violations, rep.Effects.violations()...)
	}
	return rep, nil
}

// awaitExit waits for a process sent SIGTERM to exit, and says what went wrong if it exited
// with an error or not in time.
func (r *run) awaitExit(p *proc) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s exited with %v after SIGTERM: %s", p.owner, p.err, tail(filepath.Join(r.dir, p.owner+".stderr")))
		}
		return nil
	case <-time.After(exitBound):
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.owner, exitBound)
	}
}

// exitBound is how long a consumer may take to exit after SIGTERM: its Close has 15s.
const exitBound = 30 * time.Second

// logPaths returns the log of every incarnation started so far.
func (r *run) logPaths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	paths := make([]string, len(r.procs))
	for i, p := range r.procs {
		paths[i] = p.log
	}
	return paths
}

type killEvent struct {
	owner string
	at    time.Time
}

// deadHolders counts shard leases whose owner is a killed incarnation.
func (r *run) deadHolders(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ls, err := r.store.List(cctx)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("list leases: %w", err)
	}
	r.mu.Lock()
	dead := map[string]bool{}
	for _, p := range r.procs {
		if !p.killed.IsZero() {
			dead[p.owner] = true
		}
	}
	r.mu.Unlock()
	n := 0
	for _, l := range ls {
		if _, shard := shardOf(l.Key, r.stream); shard && dead[ownerName(l.Owner)] {
			n++
		}
	}
	return n, nil
}

// ownerName returns the -owner name of the consumer that wrote owner into a lease: kinesub
// appends "#" and an incarnation to the name it is given.
func ownerName(owner string) string {
	if i := strings.LastIndexByte(owner, '#'); i >= 0 {
		return owner[:i]
	}
	return owner
}

// warmUp makes sure every shard has a checkpoint before the measured records are published.
// A shard without one opens at the tip (kinesub's default), so records published before its
// first reader opened, or before a crashed first reader checkpointed, would never be read.
// It publishes one record to each shard lacking a checkpoint until none does.
func (r *run) warmUp(ctx context.Context, pub *kinesub.Publisher) (int, error) {
	keys, err := r.shardKeys(ctx)
	if err != nil {
		return 0, err
	}
	sent := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ls, err := r.store.List(cctx)
		cancel()
		if err != nil {
			return sent, fmt.Errorf("list leases: %w", err)
		}
		done := map[string]bool{}
		for _, l := range ls {
			if id, ok := shardOf(l.Key, r.stream); ok && l.Checkpoint.Sequence != "" {
				done[id] = true
			}
		}
		var recs []kinesub.Record
		for shard, key := range keys {
			if !done[shard] {
				recs = append(recs, kinesub.Record{PartitionKey: key, Data: []byte("warm-up")})
			}
		}
		if len(recs) == 0 {
			return sent, nil
		}
		if bad := r.exited(); len(bad) > 0 {
			return sent, errors.New(strings.Join(bad, "\n"))
		}
		if time.Now().After(deadline) {
			return sent, fmt.Errorf("%d shards still have no checkpoint after 60s", len(recs))
		}
		cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		err = pub.PublishBatch(cctx, recs)
		cancel()
		if err != nil {
			return sent, fmt.Errorf("warm-up: %w", err)
		}
		sent += len(recs)
		if err := sleepUntil(ctx, time.Now().Add(300*time.Millisecond)); err != nil {
			return sent, err
		}
	}
}

// shardKeys finds, for each shard, a partition key that hashes into it.
func (r *run) shardKeys(ctx context.Context) (map[string]string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	out, err := r.kc.ListShards(cctx, &kinesis.ListShardsInput{StreamName: aws.String(r.stream)})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list shards: %w", err)
	}
	keys := map[string]string{}
	for _, sh := range out.Shards {
		lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
		if lo == nil || hi == nil {
			return nil, fmt.Errorf("shard %s: bad hash key range", aws.ToString(sh.ShardId))
		}
		for i := 0; ; i++ {
			k := warmPrefix + strconv.Itoa(i)
			sum := md5.Sum([]byte(k))
			h := new(big.Int).SetBytes(sum[:])
			if h.Cmp(lo) >= 0 && h.Cmp(hi) <= 0 {
				keys[aws.ToString(sh.ShardId)] = k
				break
			}
		}
	}
	return keys, nil
}

const warmPrefix = "warm-"

// publish writes the measured records: record i has key i mod Keys and carries that key's
// counter i div Keys, paced at Rate records per second in a call every 50ms (of at most 500
// records), so that every shard keeps receiving records. It stops after Records, or at once
// when stop closes, and returns how many it published.
func (r *run) publish(ctx context.Context, pub *kinesub.Publisher, start time.Time, stop <-chan struct{}) (int, error) {
	cfg := r.cfg
	chunk := min(max(cfg.Rate/20, 1), 500)
	recs := make([]kinesub.Record, 0, chunk)
	for i := 0; i < cfg.Records; i += chunk {
		due := start.Add(time.Duration(float64(i) / float64(cfg.Rate) * float64(time.Second)))
		if err := sleepUntil(ctx, due); err != nil {
			return i, err
		}
		select {
		case <-stop:
			return i, nil
		default:
		}
		recs = recs[:0]
		for j := i; j < min(i+chunk, cfg.Records); j++ {
			key := recordKey(j % cfg.Keys)
			recs = append(recs, kinesub.Record{PartitionKey: key, Data: []byte(key + "/" + strconv.Itoa(j/cfg.Keys))})
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := pub.PublishBatch(cctx, recs)
		cancel()
		if err != nil {
			return i, err
		}
	}
	return cfg.Records, nil
}

func recordKey(i int) string { return fmt.Sprintf("k%05d", i) }

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// tail returns the last lines of a file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// tailer follows the consumers' logs, counts the distinct measured records delivered, and
// keeps when each shard last delivered a record.
type tailer struct {
	keys   int
	seen   []bool
	n      int
	offset map[string]int64
	last   map[string]time.Time // shard → its latest delivery, of any record
}

func newTailer(records, keys int) *tailer {
	return &tailer{keys: keys, seen: make([]bool, records), offset: map[string]int64{}, last: map[string]time.Time{}}
}

// idleSince returns the shards among shards that have delivered nothing since t, as of the
// last poll.
func (t *tailer) idleSince(since time.Time, shards []string) []string {
	var idle []string
	for _, s := range shards {
		if !t.last[s].After(since) {
			idle = append(idle, s)
		}
	}
	return idle
}

func (t *tailer) poll(paths []string) int {
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			continue // not created yet
		}
		if _, err := f.Seek(t.offset[path], io.SeekStart); err == nil {
			br := bufio.NewReaderSize(f, 1<<20)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					break // an incomplete line is read again next time
				}
				t.offset[path] += int64(len(line))
				l, perr := chaoslog.Parse(strings.TrimSuffix(line, "\n"))
				if perr != nil || l.Kind != chaoslog.Delivery {
					continue
				}
				if l.Time.After(t.last[l.Shard]) {
					t.last[l.Shard] = l.Time
				}
				if id, ok := recordID(l.Key, l.Payload, t.keys, len(t.seen)); ok && !t.seen[id] {
					t.seen[id] = true
					t.n++
				}
			}
		}
		f.Close()
	}
	return t.n
}

// recordID maps a measured record's key and payload to its index, false for anything else.
func recordID(key, payload string, keys, records int) (int, bool) {
	k, c, ok := strings.Cut(payload, "/")
	if !ok || k != key || len(key) < 2 || key[0] != 'k' {
		return 0, false
	}
	ki, err1 := strconv.Atoi(key[1:])
	ci, err2 := strconv.Atoi(c)
	id := ci*keys + ki
	if err1 != nil || err2 != nil || ki >= keys || id < 0 || id >= records {
		return 0, false
	}
	return id, true
}
