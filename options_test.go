package kinesub

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/lease"
)

// noIO is a Kinesis client that fails the test on any call: options are checked first.
type noIO struct {
	kinesisiface.Kinesis
	t *testing.T
}

func (n noIO) DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	n.t.Error("DescribeStreamSummary called despite an invalid option")
	return nil, errors.New("no I/O expected")
}

func TestInvalidOptionsRejectedBeforeIO(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		name string // the option the error must name
	}{
		{WithEnhancedFanOut(""), "WithEnhancedFanOut"},
		{WithEnhancedFanOut("no spaces"), "WithEnhancedFanOut"},
		{WithEnhancedFanOut(strings.Repeat("c", 129)), "WithEnhancedFanOut"},
		{WithBatchSize(0), "WithBatchSize"},
		{WithBatchSize(10001), "WithBatchSize"},
		{WithPollInterval(0), "WithPollInterval"},
		{WithPollInterval(2 * time.Hour), "WithPollInterval"},
		{WithIdlePollInterval(500 * time.Millisecond), "WithIdlePollInterval"}, // below the 1s poll interval
		{WithIdlePollInterval(2 * time.Hour), "WithIdlePollInterval"},
		{WithShardSyncInterval(-time.Second), "WithShardSyncInterval"},
		{WithLeaseTTL(time.Millisecond), "WithLeaseTTL"},
		{WithLeaseTTL(2 * time.Hour), "WithLeaseTTL"},
		{WithCreateIfMissing(0), "WithCreateIfMissing"},
		{WithCreateIfMissing(10001), "WithCreateIfMissing"},
		{WithLeaseStore(nil), "WithLeaseStore"},
		{WithOwner(""), "WithOwner"},
		{WithOwner(strings.Repeat("x", 257)), "WithOwner"},
		{WithOwner(strings.Repeat("é", 257)), "WithOwner"},
		{WithOwner("owner-\xff"), "WithOwner"},
		{WithLogger(nil), "WithLogger"},
		{WithCheckpointInterval(-time.Second), "WithCheckpointInterval"},
		{WithMaxInFlight(0), "WithMaxInFlight"},
		{WithMaxInFlightBytes(0), "WithMaxInFlightBytes"},
		{WithMaxInFlightBytes(1<<40 + 1), "WithMaxInFlightBytes"},
		{WithLeaseStore((*lease.DynamoDB)(nil)), "WithLeaseStore"},
		{WithLeaseStore((*lease.Memory)(nil)), "WithLeaseStore"},
		{WithBufferPages(-1), "WithBufferPages"},
		{WithRequestTimeout(time.Millisecond), "WithRequestTimeout"},
		{WithRequestTimeout(time.Hour), "WithRequestTimeout"},
		{WithBalanceInterval(-time.Second), "WithBalanceInterval"},
		{WithBalanceInterval(0), "WithBalanceInterval"},
		{WithStartAt(AtSequence("shardId-000000000000", "1")), "WithStartAt"},
		{WithStartAt(Position{}), "WithStartAt"},
		{WithInitialPosition(AtSequence("shardId-000000000000", "1")), "WithInitialPosition"},
		{WithScaleTarget(0), "WithScaleTarget"},
		{WithScaleTarget(-0.5), "WithScaleTarget"},
		{WithScaleTarget(1.01), "WithScaleTarget"},
		{WithScaleTarget(math.NaN()), "WithScaleTarget"},
		{WithScaleTarget(math.Inf(1)), "WithScaleTarget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subscribe(context.Background(), noIO{t: t}, "orders", tc.opt)
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
			if !strings.Contains(err.Error(), tc.name+"(") || !strings.Contains(err.Error(), "must be") {
				t.Errorf("error %q does not name %s and its range", err, tc.name)
			}
		})
	}
}

// TestWithOwnerCountsCharacters: WithOwner takes what its documentation says, 1 to 256
// characters, however many bytes each takes.
func TestWithOwnerCountsCharacters(t *testing.T) {
	for _, owner := range []string{"o", strings.Repeat("x", 256), strings.Repeat("é", 256), strings.Repeat("😀", 256)} {
		cfg := defaultConfig()
		WithLeaseStore(lease.NewMemory())(&cfg)
		WithOwner(owner)(&cfg)
		if err := cfg.validate(); err != nil || cfg.owner != owner {
			t.Errorf("WithOwner(%d characters, %d bytes): %v", len([]rune(owner)), len(owner), err)
		}
	}
}

func TestInvalidStreamNameRejectedBeforeIO(t *testing.T) {
	for _, name := range []string{"", "has space", "slash/inside", strings.Repeat("s", 129)} {
		_, err := subscribe(context.Background(), noIO{t: t}, name)
		if !errors.Is(err, ErrInvalidOption) {
			t.Errorf("stream %q: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := Subscribe(context.Background(), nil, "orders"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil client: err = %v", err)
	}
}

func TestDefaults(t *testing.T) {
	c := defaultConfig()
	WithLeaseStore(lease.NewMemory())(&c)
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.batchSize != 1000 || c.pollInterval != time.Second || c.shardSyncInterval != 10*time.Second ||
		c.leaseTTL != 10*time.Second || c.checkpointInterval != 5*time.Second || c.balanceInterval != 20*time.Second ||
		c.idlePollInterval != 2*time.Second {
		t.Errorf("defaults changed: %+v", c)
	}
	if c.owner == "" || c.logger == nil {
		t.Error("validate must fill the owner and logger")
	}
}

// TestLeaseStoreRequired: without WithLeaseStore, Subscribe fails before any I/O and says which
// store to pass. A default in-memory store would let each instance of a service that runs twice
// read every record, with nothing to say so.
func TestLeaseStoreRequired(t *testing.T) {
	_, err := subscribe(context.Background(), noIO{t: t}, "orders", WithOwner("a"))
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("err = %v, want ErrInvalidOption", err)
	}
	for _, want := range []string{"WithLeaseStore(", "lease.NewMemory()", "lease.NewDynamoDB(", "every instance"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// An invalid option is still named first: it is the caller's first mistake to fix.
	_, err = subscribe(context.Background(), noIO{t: t}, "orders", WithBatchSize(0))
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithBatchSize(") {
		t.Errorf("err = %v, want WithBatchSize named", err)
	}
}
