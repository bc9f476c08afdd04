package kinesub

import "context"

// What Process runs while a shard drains.
//
// A hand-back or Close ends a shard's generation (nothing new is fetched or handed out) and
// then drains it: the running handlers get until the drain ends, and the last checkpoint is the
// watermark once they settled. The watermark passes only settled records, in order, so a job
// given back (never run) below a record that was handled stops the last checkpoint there: the
// next owner delivers the handled records after it again. So during a drain a job Process holds
// still starts when it fills such a gap: a job of the generation with a higher watermark index
// was acked, or runs. The others are given back at once (a drain waits for nothing it need not
// run: a key's later records, a record waiting out its backoff above everything handled). A
// seek or a lost lease ends the run at once: nothing more starts. A job that passed its checks
// counts as a hand-out under way until its handler has it (handing, process_seam.go): the
// drain releases the lease only once none is, since the next owner reads at once.

// mayStart reports whether j may start now. Called with p.mu held, for every job: a run can be
// over only once its generation ended (stale, an atomic load), so the rest is checked then.
func (p *processor) mayStart(j *job) bool {
	switch {
	case !j.m.stale():
		return true
	case j.m.runOver():
		return false
	}
	return p.fillsGap(j)
}

// fillsGap reports whether a job of j's generation with a higher watermark index was acked or
// runs. Called with p.mu held, during a drain only.
func (p *processor) fillsGap(j *job) bool { return j.m.index() < p.gapTop(j.q.lane, j.m.pg, j) }

// gapTop returns one past the highest watermark index, of the generation of page pg, of a job
// acked or running other than except: the jobs below it fill a gap. It looks at every key of the
// shard. Called with p.mu held.
func (p *processor) gapTop(l *lane, pg *shardPage, except *job) uint64 {
	var top uint64
	for _, gs := range l.gens {
		if gs.w == pg.shard && gs.gen == pg.gen {
			top = gs.ackTop
			break
		}
	}
	for _, q := range l.keys {
		if h := q.head; h != nil && h != except && h.state == jobRunning && !h.dropped &&
			h.m.pg.shard == pg.shard && h.m.pg.gen == pg.gen {
			top = max(top, h.m.index()+1)
		}
	}
	return top
}

// noteAcked records that j was acked: the highest watermark index acked of its generation,
// kept with the generation, so that the ack of a job of another one (a handler that ran on
// after its shard moved on, from an earlier generation) leaves it be. Called with p.mu held.
func (p *processor) noteAcked(j *job) {
	gs := p.genOfJob(j)
	gs.ackTop = max(gs.ackTop, j.m.index()+1)
}

// runOver reports whether no more work of m's generation may start: at once on a seek or a lost
// lease, at the end of the drain on a hand-back or Close.
func (m *Message) runOver() bool { return m.runContext().Err() != nil }

// sweepAtEnd registers the sweep of gs's jobs once its generation's run is over (a drain's
// end), after the sweep when it went stale gave back what need not run. It returns the
// function that stops the callback. Owned by the processor (aux).
func (p *processor) sweepAtEnd(gs *genState, m *Message) func() bool {
	p.aux.Add(1)
	return context.AfterFunc(m.runContext(), func() {
		defer p.aux.Done()
		p.sweep(gs)
	})
}

// mayStartLocked is mayStart for a caller without p.mu.
func (p *processor) mayStartLocked(j *job) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mayStart(j)
}

// anyJob returns a job of gs among the heads and the jobs queued behind them, or nil.
func (gs *genState) anyJob(heads []*job) *job {
	for _, h := range heads {
		for x := h; x != nil; x = x.next {
			if gs.holds(x) {
				return x
			}
		}
	}
	return nil
}
