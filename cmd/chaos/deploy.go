package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A rolling deploy restarts every consumer once, one at a time, as an orchestrator does: SIGTERM
// to the process, whose handler calls Subscriber.Close and exits; once it has exited, a new
// process (under a new owner name) starts in its place, at once or Config.StartDelay later;
// once the new one holds its share and every shard is read again, the next consumer is
// restarted. A producer publishes steadily throughout. The figures: records lost, records
// acknowledged by the old owner and delivered again, and per shard the gap between the last
// record the old owner read and the first the new one read.

// DefaultDeployConfig is the run `go run ./cmd/chaos -deploy` does without other flags: three
// rolling deploys of three consumers, with the library's default lease TTL and checkpoint
// interval, as a service would deploy with.
func DefaultDeployConfig() Config {
	c := DefaultConfig()
	c.Deploys = 3
	c.Kills = 0
	c.Records = 1_000_000 // at most: publishing stops once the deploys are done
	c.Rate = 500
	c.TTL = 10 * time.Second
	c.Checkpoint = 5 * time.Second
	return c
}

// restartEvent is one consumer restarted during a deploy.
type restartEvent struct {
	old, new string
	term     time.Time // SIGTERM sent to old
	exited   time.Time // old exited; new started right after
	started  time.Time
	ready    time.Time // every shard held evenly by the running consumers and read again
}

// deployWindow is one rolling deploy: from the first SIGTERM until the last new process was
// ready.
type deployWindow struct {
	from, to time.Time
	restarts []restartEvent
}

// readyBound is how long a restarted consumer may take until every shard is held evenly and
// read again: far beyond a clean handoff, and beyond a lease TTL or two should a release be
// missed.
const readyBound = 2 * time.Minute

// deploy runs the consumers under a steady producer through cfg.Deploys rolling deploys, then
// checks the logs.
func (r *run) deploy(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	pub, warmups, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	pctx, cancelPub := context.WithCancel(ctx)
	stop := make(chan struct{})
	var published sync.WaitGroup
	var n int
	var pubErr error
	pubStart := time.Now()
	published.Go(func() { n, pubErr = r.publish(pctx, pub, pubStart, stop) })
	defer published.Wait()
	defer cancelPub() // on an early return: the publisher stops first

	tl := newTailer(cfg.Records, cfg.Keys)
	if _, err := r.waitReady(ctx, tl); err != nil {
		return nil, fmt.Errorf("before the first deploy: %w", err)
	}
	cfg.Logf("chaos: every shard delivering after %v", time.Since(pubStart).Round(time.Millisecond))
	var windows []deployWindow
	for d := range cfg.Deploys {
		w := deployWindow{from: time.Now()}
		for slot := range cfg.Consumers {
			rs, err := r.restart(ctx, tl, slot)
			if err != nil {
				return nil, fmt.Errorf("deploy %d: %w", d+1, err)
			}
			cfg.Logf("chaos: deploy %d: %s → %s: exited %v after SIGTERM, ready %v after start",
				d+1, rs.old, rs.new, rs.exited.Sub(rs.term).Round(time.Millisecond), rs.ready.Sub(rs.started).Round(time.Millisecond))
			w.restarts = append(w.restarts, rs)
		}
		w.to = time.Now()
		windows = append(windows, w)
	}
	close(stop)
	if published.Wait(); pubErr != nil {
		return nil, fmt.Errorf("publish: %w", pubErr)
	}
	if n == cfg.Records {
		return nil, fmt.Errorf("all %d records were published before the deploys were done: raise -records", n)
	}
	cfg.Logf("chaos: published %d records in %v", n, time.Since(pubStart).Round(time.Millisecond))
	return r.finish(ctx, tl, pubStart, verifyInput{records: n, deploys: windows, warmups: warmups})
}

// restart stops slot's process with SIGTERM, starts a new one once it has exited, and waits
// until the new one is ready.
func (r *run) restart(ctx context.Context, tl *tailer, slot int) (restartEvent, error) {
	r.mu.Lock()
	old := r.live[slot]
	r.mu.Unlock()
	rs := restartEvent{old: old.owner, term: time.Now()}
	old.termed = true
	_ = old.cmd.Process.Signal(syscall.SIGTERM)
	if err := r.awaitExit(old); err != nil {
		return rs, err
	}
	rs.exited = old.ended
	if err := sleepUntil(ctx, rs.exited.Add(r.cfg.StartDelay)); err != nil {
		return rs, err
	}
	p, err := r.start(slot)
	if err != nil {
		return rs, err
	}
	rs.new, rs.started = p.owner, p.started
	if rs.ready, err = r.waitReady(ctx, tl); err != nil {
		return rs, fmt.Errorf("after restarting %s as %s: %w", rs.old, rs.new, err)
	}
	return rs, nil
}

// waitReady waits until the running consumers hold every shard, each its share (⌊n/k⌋ or
// ⌈n/k⌉ of n shards and k consumers), and every shard has delivered a record since the split
// was last seen even. It returns when it saw that.
func (r *run) waitReady(ctx context.Context, tl *tailer) (time.Time, error) {
	deadline := time.Now().Add(readyBound)
	var even time.Time // since when the split has been seen even; zero while it is not
	for {
		if bad := r.exited(); len(bad) > 0 {
			return time.Time{}, errors.New(strings.Join(bad, "\n"))
		}
		shards, why, err := r.evenSplit(ctx)
		if err != nil {
			return time.Time{}, err
		}
		switch {
		case why != "":
			even = time.Time{}
		case even.IsZero():
			even = time.Now()
		}
		if why == "" {
			tl.poll(r.logPaths())
			if idle := tl.idleSince(even, shards); len(idle) == 0 {
				return time.Now(), nil
			} else {
				why = fmt.Sprintf("no record read since the split became even from %s", strings.Join(idle, ", "))
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("not ready within %v: %s", readyBound, why)
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return time.Time{}, err
		}
	}
}

// evenSplit lists the stream's shard leases and reports why they are not held evenly by the
// running consumers ("" when they are), with the shards' ids.
func (r *run) evenSplit(ctx context.Context) (shards []string, why string, err error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ls, err := r.store.ListPrefix(cctx, r.stream+"/")
	cancel()
	if err != nil {
		return nil, "", fmt.Errorf("list leases: %w", err)
	}
	r.mu.Lock()
	per := map[string]int{}
	for _, p := range r.live {
		per[p.owner] = 0
	}
	r.mu.Unlock()
	now := time.Now()
	var unheld []string
	for _, l := range ls {
		id, ok := shardOf(l.Key, r.stream)
		if !ok {
			continue
		}
		shards = append(shards, id)
		owner := ownerName(l.Owner)
		if _, live := per[owner]; !live || !l.Held(now) {
			unheld = append(unheld, id)
			continue
		}
		per[owner]++
	}
	if len(shards) != int(r.cfg.Shards) {
		return nil, fmt.Sprintf("%d of %d shard leases in the table", len(shards), r.cfg.Shards), nil
	}
	if len(unheld) > 0 {
		return shards, fmt.Sprintf("not held by a running consumer: %s", strings.Join(unheld, ", ")), nil
	}
	lo, hi := len(shards)/len(per), (len(shards)+len(per)-1)/len(per)
	for owner, n := range per {
		if n < lo || n > hi {
			return shards, fmt.Sprintf("%s holds %d shards, not %d to %d", owner, n, lo, hi), nil
		}
	}
	return shards, "", nil
}

// DeployFigures is what the rolling deploys measured.
type DeployFigures struct {
	Deploys  int
	Restarts int
	// Gaps holds, per shard and deploy, the longest time from the last record one owner read
	// to the first record the next owner read (a shard may move twice in a deploy: to a peer
	// when its owner stops, and to the new process when it joins).
	Gaps     []time.Duration
	Handoffs int // changes of the reading owner within the deploys
	Unmoved  int // shard-deploys with no handoff (their owner never stopped): none expected
	Stops    []time.Duration
	Readies  []time.Duration
	// AckedRedelivered counts records acknowledged by an owner that then gave the shard up
	// cleanly (Close, or a hand-back to the new process), delivered again by the next owner.
	// AckedCheckpointed counts those among them whose checkpoint was written before the owner
	// began giving the shard up; the others' was left to Close's (or the hand-back's) final
	// checkpoint.
	AckedRedelivered  int
	AckedCheckpointed int
	// UnackedRedelivered counts records an owner that gave the shard up cleanly delivered but
	// never acknowledged (Close gave up waiting), delivered again by the next owner.
	UnackedRedelivered int
}

func (f *DeployFigures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "deploys:     %d (%d restarts: SIGTERM → exit p50 %v, max %v; start → shards even and read again p50 %v, max %v)\n",
		f.Deploys, f.Restarts, ms(quantile(f.Stops, 0.5)), ms(slices.Max(append(f.Stops, 0))),
		ms(quantile(f.Readies, 0.5)), ms(slices.Max(append(f.Readies, 0))))
	fmt.Fprintf(&b, "deploy gap:  p50 %v, p99 %v, max %v over %d shard-deploys (%d handoffs, %d shard-deploys unmoved); goal p99 ≤ 1s: %s\n",
		ms(quantile(f.Gaps, 0.5)), ms(quantile(f.Gaps, 0.99)), ms(slices.Max(append(f.Gaps, 0))), len(f.Gaps), f.Handoffs, f.Unmoved,
		verdict(len(f.Gaps) > 0 && quantile(f.Gaps, 0.99) <= time.Second))
	fmt.Fprintf(&b, "redelivered: %d acked before the handoff (%d of them checkpointed before it began), %d never acked; goal 0 acked: %s\n",
		f.AckedRedelivered, f.AckedCheckpointed, f.UnackedRedelivered, verdict(f.AckedRedelivered == 0))
	return b.String()
}

// deployFigures measures the handoffs within each deploy window and the redeliveries after a
// clean handoff.
func deployFigures(windows []deployWindow, byShard map[string][]*session, checkpoints map[string][]checkpointEvent) *DeployFigures {
	f := &DeployFigures{Deploys: len(windows)}
	for _, w := range windows {
		for _, rs := range w.restarts {
			f.Restarts++
			f.Stops = append(f.Stops, rs.exited.Sub(rs.term))
			f.Readies = append(f.Readies, rs.ready.Sub(rs.started))
		}
	}
	shards := make([]string, 0, len(byShard))
	for shard := range byShard {
		shards = append(shards, shard)
	}
	sort.Strings(shards)
	for _, shard := range shards {
		var ds []delivery
		for _, s := range byShard[shard] {
			ds = append(ds, s.deliveries...)
		}
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].at.Before(ds[j].at) })
		longest := make([]time.Duration, len(windows))
		moved := make([]bool, len(windows))
		for i := 1; i < len(ds); i++ {
			a, b := ds[i-1], ds[i]
			if a.s == b.s {
				continue
			}
			for wi, w := range windows {
				if !b.at.Before(w.from) && !b.at.After(w.to) {
					f.Handoffs++
					moved[wi] = true
					longest[wi] = max(longest[wi], b.at.Sub(a.at))
				}
			}
		}
		for wi := range windows {
			if moved[wi] {
				f.Gaps = append(f.Gaps, longest[wi])
			} else {
				f.Unmoved++
			}
		}

		// Each delivery after the first of a record, following a tenure that ended cleanly.
		bySeq := map[string][]delivery{}
		for _, d := range ds {
			bySeq[d.seq] = append(bySeq[d.seq], d) // in time order: ds is
		}
		for seq, rs := range bySeq {
			for i := 1; i < len(rs); i++ {
				prev, d := rs[i-1], rs[i]
				if d.counter < 0 || prev.s == d.s || prev.s.end != "released" {
					continue // warm-up records; and what verify reports otherwise
				}
				acked, ok := prev.s.acked[seq]
				if !ok || !acked.Before(d.at) {
					f.UnackedRedelivered++
					continue
				}
				f.AckedRedelivered++
				giveUp := prev.s.endAt
				if !prev.s.closing.IsZero() {
					giveUp = prev.s.closing
				}
				for _, c := range checkpoints[shard] {
					if c.owner == prev.s.owner && !c.at.Before(prev.s.taken) && c.at.Before(giveUp) && isSequence(c.seq) && !seqLess(c.seq, seq) {
						f.AckedCheckpointed++
						break
					}
				}
			}
		}
	}
	return f
}

// isSequence reports whether a checkpoint is a sequence number, not a marker.
func isSequence(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }

// quantile returns the q quantile of ds by nearest rank, 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
