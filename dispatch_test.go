package kinesub

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gostream/kinesub/lease"
)

// TestMessagesPausedPastDeadlineHandsOutOneLate: a process paused past its deadline while its
// consumer handles a record, with more of the shard fetched behind it, hands the consumer at
// most one record under its old holding as it resumes: the one whose send into Messages was
// under way when it paused. Every other record is checked again right before its send, and the
// deadline has passed: a record that waited in a buffer, checked before the pause, would reach
// the consumer while a peer reads the shard. Here the consumer runs before the rest of the
// process resumes, as it may after any whole-process pause.
func TestMessagesPausedPastDeadlineHandsOutOneLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream("paused-messages-late", 1)
		store := &cutBeats{Store: lease.NewMemory()}
		var paused atomic.Bool
		resume := make(chan struct{})
		pr := &probeSet{pause: func() {
			if paused.Load() {
				<-resume
			}
		}}
		const ttl = 600 * time.Millisecond
		sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithOwner("a"), WithLeaseTTL(ttl),
			WithInitialPosition(Horizon()), withProbes(pr))...)
		f.add(0, time.Now(), "r0", "r1", "r2", "r3", "r4")
		first := <-sub.Messages()
		held := first.Tenure().Counter
		synctest.Wait() // the rest fetched; the dispatcher offers the next record

		// The process stands still past its deadline (its renewals fail meanwhile), and its
		// consumer, done with r0, receives whatever it can before the rest of it runs again.
		paused.Store(true)
		store.cut.Store(true)
		defer func() { // resumed, also when the test fails
			if paused.Swap(false) {
				close(resume)
			}
		}()
		time.Sleep(3 * ttl)
		var late []string
		for {
			synctest.Wait()
			select {
			case m := <-sub.Messages():
				if m.Tenure().Counter == held {
					late = append(late, string(m.Data()))
				}
				continue
			default:
			}
			break
		}
		if len(late) > 1 {
			t.Fatalf("received %v under the holding the deadline ended, after it: at most the one record whose send was under way may come", late)
		}
		if len(late) == 1 && late[0] != "r1" {
			t.Fatalf("received %s late, want r1 (the one whose send was under way) or nothing", late[0])
		}

		store.cut.Store(false)
		paused.Store(false)
		close(resume)
		select {
		case m := <-sub.Messages():
			if c := m.Tenure().Counter; c <= held {
				t.Fatalf("%s received under counter %d after the resume, want above %d: read again under a new holding", m.Data(), c, held)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the shard was not read again after the resume")
		}
	})
}
