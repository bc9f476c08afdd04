package kinesub

// A handler may run on after its shard moved on: one that ignores its ctx, or runs past the
// drain of a hand-back. Its key may then come back to this Process on another shard: a child
// of its shard (a split or merge finished by the lease's next holder), or a shard the key's
// records were moved to. Records of a key must not start while an earlier one runs, so the
// running handler lingers under its order key, and a head of that key in another shard's lane
// waits until no handler of the key lingers. The shard's own later records already wait behind
// it in its own queue.
//
// Everything here is guarded by the processor's mutex.

// linger is one order key's handlers that ran on when their shards moved on, and the heads of
// other lanes that wait for them.
type linger struct {
	running []*job
	waiting []*job
}

// linger notes that h, running, ran on when its shard moved on.
func (p *processor) linger(h *job) {
	lg := p.lingers[h.q.key]
	if lg == nil {
		lg = &linger{}
		p.lingers[h.q.key] = lg
	}
	lg.running = append(lg.running, h)
	h.lingers = true
}

// headReady makes j, the new head of its key's queue, ready, unless a handler of its key from
// another shard lingers: then j waits for it.
func (p *processor) headReady(j *job) {
	if len(p.lingers) > 0 {
		if lg := p.lingers[j.q.key]; lg != nil {
			for _, r := range lg.running {
				if r.q.lane != j.q.lane {
					j.state = jobQueued
					lg.waiting = append(lg.waiting, j)
					return
				}
			}
		}
	}
	p.makeReady(j)
}

// unlinger notes that j, lingering, finished; once no handler of its key lingers, the heads
// that waited for them go on.
func (p *processor) unlinger(j *job) {
	j.lingers = false
	key := j.q.key
	lg := p.lingers[key]
	for i, r := range lg.running {
		if r == j {
			lg.running = append(lg.running[:i], lg.running[i+1:]...)
			break
		}
	}
	if len(lg.running) > 0 {
		return
	}
	delete(p.lingers, key)
	if p.closing {
		return // stop gives the waiting heads back
	}
	for _, w := range lg.waiting {
		// Given back meanwhile (its shard moved on too), or no longer its key's head: nothing.
		if !w.dropped && w.state == jobQueued && w.q.head == w {
			p.makeReady(w)
		}
	}
}
