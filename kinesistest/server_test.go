package kinesistest

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestOptionsRejected(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithIteratorLifetime(0), "WithIteratorLifetime 0s: must be in (0, 24h]"},
		{WithSubscriptionLifetime(25 * time.Hour), "WithSubscriptionLifetime 25h0m0s: must be in (0, 24h]"},
		{WithIdleEventInterval(time.Microsecond), "WithIdleEventInterval 1µs: must be in [1ms, 1m]"},
		{WithStatusDelay(-time.Second), "WithStatusDelay -1s: must be in [0, 1h]"},
		{WithClock(nil), "WithClock: the clock must not be nil"},
		{WithRegion(""), "WithRegion: the region must not be empty"},
		{WithFaults(&FaultPlan{Faults: []Fault{{Kind: Latency, Probability: 1}}}), "Faults[0].Latency 0s: must be in (0, 1m]"},
		{WithFaults(&FaultPlan{Faults: []Fault{{Probability: 1}}}), "Faults[0].Kind 0: must be Throttle"},
	} {
		s, err := Start(tc.opt)
		if err == nil {
			s.Close()
			t.Errorf("Start accepted an option that should fail with %q", tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q, want it to contain %q", err, tc.want)
		}
	}
}

func TestSequenceNumbers(t *testing.T) {
	sh := &shard{index: 7, streamID: 123, gen: 2, spread: spread(123, 7)}
	s := seqString(42, sh)
	if len(s) != 56 {
		t.Fatalf("%s has %d digits, want 56", s, len(s))
	}
	p, ok := parseSeq(s)
	if !ok || p != (seqParts{gen: 2, spread: sh.spread, counter: 42, shardIndex: 7, streamID: 123}) {
		t.Fatalf("parseSeq(%s) = %+v %v, want gen 2, spread %d, counter 42, shard 7, stream 123", s, p, ok, sh.spread)
	}
	if later := seqString(43, sh); later <= s {
		t.Fatalf("the shard's next number %s does not sort after %s", later, s)
	}
	if child := seqString(1, &shard{index: 8, streamID: 123, gen: 3, spread: spread(123, 8)}); child <= seqString(1<<62, sh) {
		t.Fatalf("a child's first number %s does not sort after its parent's", child)
	}
	for _, bad := range []string{"", "123", strings.Repeat("9", 56), "49" + strings.Repeat("x", 54)} {
		if _, ok := parseSeq(bad); ok {
			t.Errorf("parseSeq(%q) accepted it", bad)
		}
	}
}

// TestSequenceOrderAcrossShards: which of two shards of one generation numbers above the other
// varies from stream to stream, so no test can come to rely on an order between shards.
func TestSequenceOrderAcrossShards(t *testing.T) {
	srv := NewServer()
	defer srv.Close()
	ctx := context.Background()
	firstBelow := map[bool]int{}
	for i := range 8 {
		name := fmt.Sprintf("s%d", i)
		if err := srv.CreateStream(ctx, name, 2); err != nil {
			t.Fatal(err)
		}
		// MD5 puts "a" in the first half of the hash keys, "b" in the second.
		a, err1 := srv.Put(ctx, name, "a", []byte("x"))
		b, err2 := srv.Put(ctx, name, "b", []byte("x"))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		firstBelow[a[0] < b[0]]++
	}
	if firstBelow[true] == 0 || firstBelow[false] == 0 {
		t.Fatalf("over 8 streams, shard 0 numbered below shard 1 %d times and above it %d times: want both", firstBelow[true], firstBelow[false])
	}
}

func TestUniformRanges(t *testing.T) {
	for _, n := range []int{1, 3, 7} {
		rs := uniformRanges(n)
		if rs[0].start.Sign() != 0 || rs[n-1].end.Cmp(maxHashKey) != 0 {
			t.Fatalf("%d ranges span %s to %s, want 0 to 2^128-1", n, rs[0].start, rs[n-1].end)
		}
		for i := 1; i < n; i++ {
			if next := new(big.Int).Add(rs[i-1].end, big.NewInt(1)); rs[i].start.Cmp(next) != 0 {
				t.Fatalf("range %d starts at %s, want %s, right after the one before", i, rs[i].start, next)
			}
		}
	}
}

func TestShardLimits(t *testing.T) {
	var l shardLimits
	now := time.Unix(1000, 0)
	for i := range readCallsPerSecond {
		if !l.readCall(now) {
			t.Fatalf("call %d of %d in a second throttled", i+1, readCallsPerSecond)
		}
	}
	if l.readCall(now.Add(999 * time.Millisecond)) {
		t.Fatal("a sixth call within a second was allowed")
	}
	now = now.Add(time.Second)
	if !l.readCall(now) {
		t.Fatal("a call a second later throttled")
	}
	// A large answer throttles the calls after it until the read budget refills.
	l.read(6<<20, now)
	if l.readCall(now.Add(time.Second)) {
		t.Fatal("a call a second after reading 6 MiB was allowed")
	}
	if !l.readCall(now.Add(3 * time.Second)) {
		t.Fatal("a call 3 s after reading 6 MiB (2 MiB/s) throttled")
	}
}
