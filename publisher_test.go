package kinesub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/gostream/kinesub/internal/envelope"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/kpl"
	"github.com/gostream/kinesub/internal/publish"
	"github.com/gostream/kinesub/internal/testenv"
)

// fakeKinesis answers ListShards, PutRecord and PutRecords from functions and records every
// PutRecords call; any other method panics (the embedded interface is nil).
type fakeKinesis struct {
	kinesisiface.Kinesis

	putRecord  func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error)
	putRecords func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error)
	// listShards answers ListShards; nil lists one shard, shardId-000000000000, over the whole
	// hash-key space.
	listShards func() (*kinesis.ListShardsOutput, error)

	mu    sync.Mutex
	calls [][]types.PutRecordsRequestEntry
	lists int
}

// oneShard is the listing of a stream of one shard over the whole hash-key space.
func oneShard() *kinesis.ListShardsOutput {
	return &kinesis.ListShardsOutput{Shards: []types.Shard{{
		ShardId:             aws.String("shardId-000000000000"),
		HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String("0"), EndingHashKey: aws.String("340282366920938463463374607431768211455")},
		SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String("1")},
	}}}
}

// noListing makes a publisher go without a shard map, so unpaced.
func noListing() (*kinesis.ListShardsOutput, error) {
	return nil, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not allowed", Fault: smithy.FaultClient}
}

func (f *fakeKinesis) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	f.mu.Lock()
	f.lists++
	f.mu.Unlock()
	if aws.ToString(in.StreamName) != "s" {
		return nil, fmt.Errorf("fake: stream %q", aws.ToString(in.StreamName))
	}
	if f.listShards == nil {
		return oneShard(), nil
	}
	return f.listShards()
}

func (f *fakeKinesis) PutRecord(ctx context.Context, in *kinesis.PutRecordInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	return f.putRecord(in)
}

func entrySize(e *types.PutRecordsRequestEntry) int {
	return len(e.Data) + len(aws.ToString(e.PartitionKey))
}

func (f *fakeKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	if aws.ToString(in.StreamName) != "s" {
		return nil, fmt.Errorf("fake: stream %q", aws.ToString(in.StreamName))
	}
	if len(in.Records) > publish.MaxBatchRecords {
		return nil, fmt.Errorf("fake: %d records in one call", len(in.Records))
	}
	size := 0
	for i := range in.Records {
		size += entrySize(&in.Records[i])
	}
	if size > publish.MaxBatchBytes {
		return nil, fmt.Errorf("fake: %d bytes in one call", size)
	}
	f.mu.Lock()
	call := len(f.calls)
	f.calls = append(f.calls, slices.Clone(in.Records))
	f.mu.Unlock()
	if f.putRecords == nil {
		return refuse(in.Records, func(string) bool { return false }), nil
	}
	return f.putRecords(call, in.Records)
}

// sent returns the payload of each record of each PutRecords call.
func (f *fakeKinesis) sent() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]string
	for _, c := range f.calls {
		var ps []string
		for _, e := range c {
			_, p := envelope.Decode(e.Data)
			ps = append(ps, string(p))
		}
		out = append(out, ps)
	}
	return out
}

func (f *fakeKinesis) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// refuse answers a PutRecords call, refusing the entries whose payload bad selects.
func refuse(entries []types.PutRecordsRequestEntry, bad func(payload string) bool) *kinesis.PutRecordsOutput {
	out := &kinesis.PutRecordsOutput{FailedRecordCount: aws.Int32(0)}
	for i, e := range entries {
		_, p := envelope.Decode(e.Data)
		if bad(string(p)) {
			*out.FailedRecordCount++
			out.Records = append(out.Records, types.PutRecordsResultEntry{
				ErrorCode:    aws.String("ProvisionedThroughputExceededException"),
				ErrorMessage: aws.String("Rate exceeded for shard shardId-000000000000"),
			})
			continue
		}
		out.Records = append(out.Records, types.PutRecordsResultEntry{
			SequenceNumber: aws.String(strconv.Itoa(1000 + i)), ShardId: aws.String("shardId-000000000000"),
		})
	}
	return out
}

func among(payloads ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(payloads, p) }
}

// numbered returns n records with payloads "0", "1", … spread over three partition keys.
func numbered(n int) []Record {
	rs := make([]Record, n)
	for i := range rs {
		rs[i] = Record{PartitionKey: "key-" + strconv.Itoa(i%3), Data: []byte(strconv.Itoa(i))}
	}
	return rs
}

// distinct returns n records with payloads "0", "1", … each under a partition key of its own.
func distinct(n int) []Record {
	rs := make([]Record, n)
	for i := range rs {
		rs[i] = Record{PartitionKey: "key-" + strconv.Itoa(i), Data: []byte(strconv.Itoa(i))}
	}
	return rs
}

func seq(from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, strconv.Itoa(i))
	}
	return s
}

func seqInts(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func newFakePublisher(t *testing.T, f *fakeKinesis, opts ...PublisherOption) *Publisher {
	t.Helper()
	p, err := newPublisher(f, "s", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPublisherValidates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		opts   []PublisherOption
		option string // named in the error; "" for no error
	}{
		{"defaults", "s", nil, ""},
		{"full ranges", "s", []PublisherOption{WithPublishRetries(0), WithPublishBackoff(time.Millisecond, time.Millisecond), WithPublishTimeout(10 * time.Millisecond)}, ""},
		{"upper ranges", "s", []PublisherOption{WithPublishRetries(100), WithPublishBackoff(time.Minute, 5*time.Minute), WithPublishTimeout(time.Hour), WithPublishAggregation(true)}, ""},
		{"empty stream", "", nil, "NewPublisher stream"},
		{"stream with space", "my stream", nil, "NewPublisher stream"},
		{"stream too long", strings.Repeat("s", 129), nil, "NewPublisher stream"},
		{"negative retries", "s", []PublisherOption{WithPublishRetries(-1)}, "WithPublishRetries"},
		{"too many retries", "s", []PublisherOption{WithPublishRetries(101)}, "WithPublishRetries"},
		{"zero backoff", "s", []PublisherOption{WithPublishBackoff(0, time.Second)}, "WithPublishBackoff"},
		{"max below min", "s", []PublisherOption{WithPublishBackoff(time.Second, time.Millisecond)}, "WithPublishBackoff"},
		{"min too long", "s", []PublisherOption{WithPublishBackoff(2*time.Minute, 3*time.Minute)}, "WithPublishBackoff"},
		{"max too long", "s", []PublisherOption{WithPublishBackoff(time.Second, time.Hour)}, "WithPublishBackoff"},
		{"zero timeout", "s", []PublisherOption{WithPublishTimeout(0)}, "WithPublishTimeout"},
		{"timeout too short", "s", []PublisherOption{WithPublishTimeout(time.Millisecond)}, "WithPublishTimeout"},
		{"timeout too long", "s", []PublisherOption{WithPublishTimeout(2 * time.Hour)}, "WithPublishTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeKinesis{}
			p, err := newPublisher(f, tc.stream, tc.opts...)
			if f.lists != 0 || f.callCount() != 0 {
				t.Errorf("newPublisher made calls")
			}
			if tc.option == "" {
				if err != nil || p == nil {
					t.Fatalf("newPublisher = %v, %v; want a publisher", p, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.option+"(") || !strings.Contains(err.Error(), "must be") {
				t.Fatalf("newPublisher error = %v, want ErrInvalidOption naming %s and its range", err, tc.option)
			}
		})
	}
	if _, err := NewPublisher(nil, "s"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewPublisher(nil client) error = %v, want ErrInvalidOption", err)
	}
}

// emoji is n characters outside the Basic Multilingual Plane: 2n UTF-16 code units, 4n bytes.
func emoji(n int) string { return strings.Repeat("😀", n) }

func TestPublishRejectsInvalidRecords(t *testing.T) {
	maxData := bytes.Repeat([]byte("x"), publish.MaxRecordBytes-1)
	for _, tc := range []struct {
		name string
		rec  Record
		err  error // also wrapped, besides ErrInvalidRecord
	}{
		{"empty key", Record{PartitionKey: "", Data: []byte("p")}, nil},
		{"key of 257 characters", Record{PartitionKey: strings.Repeat("k", 257), Data: []byte("p")}, nil},
		{"key of 129 emoji", Record{PartitionKey: emoji(129), Data: []byte("p")}, nil}, // 258 UTF-16 units
		{"key of 200 emoji", Record{PartitionKey: emoji(200), Data: []byte("p")}, nil}, // 200 characters
		{"key of 255 units and an emoji", Record{PartitionKey: strings.Repeat("k", 255) + emoji(1), Data: []byte("p")}, nil},
		{"key not UTF-8", Record{PartitionKey: "k\xff", Data: []byte("p")}, nil},
		{"data over 1 MiB with key", Record{PartitionKey: "kk", Data: maxData}, nil},
		{"envelope pushes over 1 MiB", Record{PartitionKey: "k", Data: maxData, Headers: map[string]string{"a": "b"}}, nil},
		{"bad header name", Record{PartitionKey: "k", Data: []byte("p"), Headers: map[string]string{"a:b": "v"}}, ErrInvalidHeader},
		{"bad header value", Record{PartitionKey: "k", Data: []byte("p"), Headers: map[string]string{"a": "1\n2"}}, ErrInvalidHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeKinesis{putRecord: func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error) {
				t.Error("PutRecord called for an invalid record")
				return &kinesis.PutRecordOutput{}, nil
			}}
			p := newFakePublisher(t, f)
			_, err := p.Publish(t.Context(), tc.rec.PartitionKey, tc.rec.Data, tc.rec.Headers)
			if !errors.Is(err, ErrInvalidRecord) || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Errorf("Publish error = %v, want ErrInvalidRecord and %v", err, tc.err)
			}
			// In a batch, one bad record stops the batch before any I/O and is named by index.
			batch := append(numbered(3), tc.rec)
			err = p.PublishBatch(t.Context(), batch)
			if !errors.Is(err, ErrInvalidRecord) || (tc.err != nil && !errors.Is(err, tc.err)) || !strings.Contains(err.Error(), "record 3:") {
				t.Errorf("PublishBatch error = %v, want ErrInvalidRecord and %v naming record 3", err, tc.err)
			}
			if f.callCount() != 0 || f.lists != 0 {
				t.Errorf("PublishBatch made %d PutRecords and %d ListShards calls for a batch with an invalid record", f.callCount(), f.lists)
			}
		})
	}
}

func TestPublishRejectsInvalidExplicitHashKeys(t *testing.T) {
	for _, ehk := range []string{"-1", "+1", "01", "1.5", "x", " 1", "340282366920938463463374607431768211456", strings.Repeat("9", 40)} {
		f := &fakeKinesis{}
		err := newFakePublisher(t, f).PublishBatch(t.Context(), append(numbered(2), Record{PartitionKey: "k", ExplicitHashKey: ehk}))
		if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "record 2:") {
			t.Errorf("explicit hash key %q: PublishBatch error = %v, want ErrInvalidRecord naming record 2", ehk, err)
		}
		if f.callCount() != 0 {
			t.Errorf("explicit hash key %q: %d calls", ehk, f.callCount())
		}
	}
}

// TestPublishBatchInvalidKeyFailsNoValidRecord: a partition key of 200 emoji is 200 characters
// but 400 UTF-16 code units, which the service refuses: the batch fails at once naming that
// record, with ErrInvalidRecord, and no valid record of the batch is sent and then failed.
func TestPublishBatchInvalidKeyFailsNoValidRecord(t *testing.T) {
	f := &fakeKinesis{}
	recs := append(distinct(600), Record{PartitionKey: emoji(200), Data: []byte("600")})
	err := newFakePublisher(t, f).PublishBatch(t.Context(), recs)
	var perr *PublishError
	if !errors.Is(err, ErrInvalidRecord) || errors.As(err, &perr) || !strings.Contains(err.Error(), "record 600:") || !strings.Contains(err.Error(), "400 UTF-16 code units") {
		t.Fatalf("PublishBatch error = %v, want ErrInvalidRecord naming record 600 and its 400 UTF-16 code units", err)
	}
	if f.callCount() != 0 {
		t.Errorf("%d calls: valid records were sent", f.callCount())
	}
}

func TestPublishLimitsAreInclusive(t *testing.T) {
	f := &fakeKinesis{putRecord: func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error) {
		return &kinesis.PutRecordOutput{SequenceNumber: aws.String("1")}, nil
	}}
	p := newFakePublisher(t, f)
	recs := []Record{
		{PartitionKey: "k", Data: bytes.Repeat([]byte("x"), publish.MaxRecordBytes-1)},
		{PartitionKey: strings.Repeat("é", 256), Data: []byte("p")}, // 256 characters, 512 bytes
		{PartitionKey: emoji(128), Data: []byte("p")},               // 256 UTF-16 code units, 512 bytes
		{PartitionKey: strings.Repeat("k", 254) + emoji(1), Data: []byte("p")},
	}
	for _, r := range recs {
		if _, err := p.Publish(t.Context(), r.PartitionKey, r.Data, r.Headers); err != nil {
			t.Errorf("Publish(key of %d bytes, %d bytes of data) = %v", len(r.PartitionKey), len(r.Data), err)
		}
	}
	recs = append(recs, Record{PartitionKey: "a", ExplicitHashKey: "0"},
		Record{PartitionKey: "b", ExplicitHashKey: "340282366920938463463374607431768211455"})
	if err := p.PublishBatch(t.Context(), recs); err != nil {
		t.Errorf("PublishBatch = %v", err)
	}
}

func TestPublish(t *testing.T) {
	var got *kinesis.PutRecordInput
	f := &fakeKinesis{putRecord: func(in *kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error) {
		got = in
		return &kinesis.PutRecordOutput{SequenceNumber: aws.String("49590338271490256608559692538361571095921575989136588898"), ShardId: aws.String("shardId-000000000000")}, nil
	}}
	p := newFakePublisher(t, f)
	headers := map[string]string{"trace-id": "abc", "content-type": "text/plain"}
	sq, err := p.Publish(t.Context(), "user-42", []byte("hello"), headers)
	if err != nil {
		t.Fatal(err)
	}
	if sq != "49590338271490256608559692538361571095921575989136588898" {
		t.Errorf("sequence = %q", sq)
	}
	if aws.ToString(got.StreamName) != "s" || aws.ToString(got.PartitionKey) != "user-42" {
		t.Errorf("PutRecord stream %q, key %q", aws.ToString(got.StreamName), aws.ToString(got.PartitionKey))
	}
	h, payload := envelope.Decode(got.Data)
	if !maps.Equal(h, headers) || string(payload) != "hello" {
		t.Errorf("record decodes to %q, %q", h, payload)
	}
	if f.lists != 0 {
		t.Errorf("Publish listed the shards")
	}
}

func TestPublishClassifiesMissingStream(t *testing.T) {
	f := &fakeKinesis{putRecord: func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error) {
		return nil, &types.ResourceNotFoundException{Message: aws.String("Stream s not found")}
	}}
	p := newFakePublisher(t, f)
	_, err := p.Publish(t.Context(), "k", []byte("p"), nil)
	var rnf *types.ResourceNotFoundException
	if !errors.Is(err, ErrStreamNotFound) || !errors.As(err, &rnf) {
		t.Errorf("Publish error = %v, want ErrStreamNotFound wrapping the SDK's exception", err)
	}
}

func TestPublishBatchResendsOnlyRefusedRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeKinesis{putRecords: func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			switch call {
			case 0:
				return refuse(in, among("2", "5", "7")), nil
			case 1:
				return refuse(in, among("5")), nil
			}
			return refuse(in, among()), nil
		}}
		p := newFakePublisher(t, f)
		if err := p.PublishBatch(t.Context(), distinct(10)); err != nil {
			t.Fatal(err)
		}
		want := [][]string{seq(0, 10), {"2", "5", "7"}, {"5"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("calls sent %q, want %q", got, want)
		}
		// The resent entries keep their partition keys.
		for _, e := range f.calls[1] {
			_, p := envelope.Decode(e.Data)
			if want := "key-" + string(p); aws.ToString(e.PartitionKey) != want {
				t.Errorf("record %s resent with key %q, want %q", p, aws.ToString(e.PartitionKey), want)
			}
		}
	})
}

func TestPublishBatchChunks(t *testing.T) {
	big := func(n, size int) []Record {
		rs := make([]Record, n)
		for i := range rs {
			// Payload "i" padded to size bytes; data plus the 1-byte key is size+1.
			d := []byte(strconv.Itoa(i))
			rs[i] = Record{PartitionKey: string(rune('a' + i)), Data: append(d, bytes.Repeat([]byte{' '}, size-len(d))...)}
		}
		return rs
	}
	for _, tc := range []struct {
		name    string
		records []Record
		sizes   []int
	}{
		{"none", nil, nil},
		{"one", distinct(1), []int{1}},
		{"exactly 500", distinct(500), []int{500}},
		{"1200 by count", distinct(1200), []int{500, 500, 200}},
		{"exactly 5 MiB per call", big(11, publish.MaxRecordBytes-1), []int{5, 5, 1}},
		{"by size", big(12, 1_000_000), []int{5, 5, 2}},
		{"one byte over 5 MiB", append(big(5, publish.MaxRecordBytes-1), Record{PartitionKey: "z", Data: []byte("5")}), []int{5, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Without a shard map nothing is paced, so the calls are as full as the service
			// allows; they may run concurrently, so their order is not checked.
			f := &fakeKinesis{listShards: noListing}
			p := newFakePublisher(t, f)
			if err := p.PublishBatch(t.Context(), tc.records); err != nil {
				t.Fatal(err)
			}
			var sizes []int
			var all []string
			for _, c := range f.sent() {
				sizes = append(sizes, len(c))
				for _, s := range c {
					all = append(all, strings.TrimRight(s, " "))
				}
			}
			slices.Sort(sizes)
			slices.SortFunc(all, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
			if want := slices.Sorted(slices.Values(tc.sizes)); !slices.Equal(sizes, want) {
				t.Errorf("call sizes %v, want %v", sizes, want)
			}
			if !slices.Equal(all, seq(0, len(tc.records))) {
				t.Errorf("records lost or sent twice: %d sent of %d", len(all), len(tc.records))
			}
		})
	}
}

// writeTimes answers every PutRecords call, writing each record, and notes when each payload was
// written.
type writeTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (w *writeTimes) answer(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at == nil {
		w.at = map[string]time.Time{}
	}
	for _, e := range in {
		_, p := envelope.Decode(e.Data)
		w.at[string(p)] = time.Now()
	}
	return refuse(in, among()), nil
}

// TestPublishBatchPacesEachShard: one shard takes 1,000 records and 1 MiB a second, with a
// second's worth at once: a burst is sent at that pace, on the bubble's exact clock.
func TestPublishBatchPacesEachShard(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var w writeTimes
			p := newFakePublisher(t, &fakeKinesis{putRecords: w.answer})
			start := time.Now()
			if err := p.PublishBatch(t.Context(), distinct(3000)); err != nil {
				t.Fatal(err)
			}
			// A second's worth at once, less the head start a new pacer keeps in hand, then
			// 1,000 a second, in groups of 500.
			h := publish.PacerHeadStart
			for i, want := range map[int]time.Duration{0: 0, 499: 0, 500: h, 999: h,
				1000: h + 500*time.Millisecond, 1499: h + 500*time.Millisecond, 1500: h + time.Second, 2999: h + 2*time.Second} {
				if got := w.at[strconv.Itoa(i)].Sub(start); got != want {
					t.Errorf("record %d written after %v, want %v", i, got, want)
				}
			}
		})
	})
	t.Run("bytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var w writeTimes
			p := newFakePublisher(t, &fakeKinesis{putRecords: w.answer})
			recs := distinct(4)
			for i := range recs {
				recs[i].Data = append(recs[i].Data, make([]byte, 600_000)...)
			}
			start := time.Now()
			if err := p.PublishBatch(t.Context(), recs); err != nil {
				t.Fatal(err)
			}
			// 600,006 bytes each: one at once, then one every 0.57 s, less the head start a
			// new pacer keeps in hand.
			for i := range recs {
				_, payload := envelope.Decode(recs[i].Data)
				got := w.at[string(payload)].Sub(start).Seconds()
				if want := max(0, float64(600_006*(i+1))/publish.ShardBytesPerSecond-1+publish.PacerHeadStart.Seconds()); got < want-0.001 || got > want+0.001 {
					t.Errorf("record %d written after %.3fs, want %.3fs", i, got, want)
				}
			}
		})
	})
}

// TestPublishBatchWaitsForTheFirstListing: calls that start while the publisher lists the
// shards for the first time wait for the listing, rather than send unpaced: two calls of 1,500
// records to one shard take it at its pace together.
func TestPublishBatchWaitsForTheFirstListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w writeTimes
		release := make(chan struct{})
		f := &fakeKinesis{putRecords: w.answer, listShards: func() (*kinesis.ListShardsOutput, error) {
			<-release
			return oneShard(), nil
		}}
		p := newFakePublisher(t, f)
		recs := distinct(3000)
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { require.NoError(t, p.PublishBatch(t.Context(), recs[:1500])) })
		synctest.Wait() // the first call is listing the shards
		wg.Go(func() { require.NoError(t, p.PublishBatch(t.Context(), recs[1500:])) })
		synctest.Wait()
		close(release)
		wg.Wait()
		if f.lists != 1 {
			t.Errorf("%d listings, want 1", f.lists)
		}
		atOnce := 0
		for _, at := range w.at {
			if at.Equal(start) {
				atOnce++
			}
		}
		if want := publish.ShardRecordsPerSecond - int(publish.ShardRecordsPerSecond*publish.PacerHeadStart/time.Second); atOnce > want {
			t.Errorf("%d records written at once, want at most %d", atOnce, want)
		}
	})
}

// twoShards lists two shards that split the hash-key space in halves.
func twoShards() (*kinesis.ListShardsOutput, error) {
	out := oneShard()
	out.Shards[0].HashKeyRange.EndingHashKey = aws.String("170141183460469231731687303715884105727")
	out.Shards = append(out.Shards, types.Shard{
		ShardId:             aws.String("shardId-000000000001"),
		HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String("170141183460469231731687303715884105728"), EndingHashKey: aws.String("340282366920938463463374607431768211455")},
		SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String("1")},
	})
	return out, nil
}

// TestPublishBatchShardsDoNotWaitForEachOther: one shard refuses everything; the records of the
// other are written at their own pace meanwhile, and only the refused shard's records fail, at
// the time budget.
func TestPublishBatchShardsDoNotWaitForEachOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w writeTimes
		f := &fakeKinesis{listShards: twoShards, putRecords: func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			var ok []types.PutRecordsRequestEntry
			for _, e := range in {
				if aws.ToString(e.ExplicitHashKey) == "0" {
					ok = append(ok, e)
				}
			}
			w.answer(call, ok)
			return refuse(in, func(p string) bool { n, _ := strconv.Atoi(p); return n%2 == 1 }), nil
		}}
		p := newFakePublisher(t, f, WithPublishTimeout(10*time.Second))
		recs := distinct(4000)
		for i := range recs {
			recs[i].ExplicitHashKey = "0" // the first shard
			if i%2 == 1 {
				recs[i].ExplicitHashKey = "170141183460469231731687303715884105728" // the second
			}
		}
		start := time.Now()
		err := p.PublishBatch(t.Context(), recs)
		var perr *PublishError
		if !errors.As(err, &perr) || perr.Err != nil || perr.ErrorCode != "ProvisionedThroughputExceededException" {
			t.Fatalf("PublishBatch error = %v, want the second shard's records failed by their time budget", err)
		}
		if want := seqFilter(4000, func(i int) bool { return i%2 == 1 }); !slices.Equal(perr.Failed, want) {
			t.Errorf("Failed = %d records, want the second shard's %d", len(perr.Failed), len(want))
		}
		if got := time.Since(start); got < 10*time.Second || got > 10*time.Second+100*time.Millisecond {
			t.Errorf("PublishBatch returned after %v, want the time budget, 10s", got)
		}
		// 2,000 records for the first shard: a second's worth at once less the head start,
		// the rest at 1,000 a second.
		if got, want := w.at["3998"].Sub(start), time.Second+publish.PacerHeadStart; got != want {
			t.Errorf("the first shard's last record written after %v, want %v", got, want)
		}
	})
}

func seqFilter(n int, keep func(int) bool) []int {
	var s []int
	for i := range n {
		if keep(i) {
			s = append(s, i)
		}
	}
	return s
}

// storingFake is a stream of one shard that stores what it accepts and refuses a random share
// of the records of every call: throttled, or failed internally.
type storingFake struct {
	mu       sync.Mutex
	rng      *rand.Rand
	throttle float64 // share of records throttled
	internal float64 // share failed with InternalFailure
	stored   map[string][]string
	loseAt   map[int]bool // calls whose answer is lost after their records were stored
}

func (s *storingFake) answer(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &kinesis.PutRecordsOutput{FailedRecordCount: aws.Int32(0)}
	for _, e := range in {
		var code string
		switch x := s.rng.Float64(); {
		case x < s.throttle:
			code = "ProvisionedThroughputExceededException"
		case x < s.throttle+s.internal:
			code = "InternalFailure"
		}
		if code != "" {
			*out.FailedRecordCount++
			out.Records = append(out.Records, types.PutRecordsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String("refused")})
			continue
		}
		_, p := envelope.Decode(e.Data)
		k := aws.ToString(e.PartitionKey)
		s.stored[k] = append(s.stored[k], string(p))
		out.Records = append(out.Records, types.PutRecordsResultEntry{SequenceNumber: aws.String("1"), ShardId: aws.String("shardId-000000000000")})
	}
	if s.loseAt[call] {
		return nil, &smithyhttp.RequestSendError{Err: io.ErrUnexpectedEOF}
	}
	return out, nil
}

// keyed returns n records over keys partition keys with payloads "<key>/<i>", i counting each
// key's records from 0.
func keyedRecords(n, keys int) []Record {
	rs := make([]Record, n)
	for i := range rs {
		k := "key-" + strconv.Itoa(i%keys)
		rs[i] = Record{PartitionKey: k, Data: []byte(k + "/" + strconv.Itoa(i/keys))}
	}
	return rs
}

// checkKeyOrder checks that each key's stored payloads are its records in order, each once.
func checkKeyOrder(t *testing.T, stored map[string][]string, n, keys int) {
	t.Helper()
	total := 0
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		var want []string
		for i := k; i < n; i += keys {
			want = append(want, key+"/"+strconv.Itoa(i/keys))
		}
		if got := stored[key]; !slices.Equal(got, want) {
			t.Errorf("key %s stored %d records %q…, want %d in order", key, len(got), got[:min(len(got), 5)], len(want))
		}
		total += len(stored[key])
	}
	if total != n {
		t.Errorf("%d records stored, want %d", total, n)
	}
}

// TestPublishBatchKeepsKeyOrder: with a third of the records throttled and some failed inside
// the service at random, every record is written once, and each partition key's records are
// stored in slice order: a refused record is resent before any later record of its key is sent.
func TestPublishBatchKeepsKeyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &storingFake{rng: rand.New(rand.NewPCG(1, 2)), throttle: 0.3, internal: 0.05, stored: map[string][]string{}}
		p := newFakePublisher(t, &fakeKinesis{putRecords: s.answer}, WithPublishBackoff(time.Millisecond, 50*time.Millisecond))
		const n, keys = 3000, 40
		if err := p.PublishBatch(t.Context(), keyedRecords(n, keys)); err != nil {
			t.Fatal(err)
		}
		checkKeyOrder(t, s.stored, n, keys)
	})
}

// TestPublishBatchAggregatedKeepsKeyOrder: the same with aggregation: an aggregate refused is
// packed again, and no key's records are ever in two aggregates awaiting answers.
func TestPublishBatchAggregatedKeepsKeyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &storingFake{rng: rand.New(rand.NewPCG(3, 4)), throttle: 0.3, internal: 0.05, stored: map[string][]string{}}
		// The fake stores user records: it deaggregates what it accepts.
		deagg := func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			out, err := s.answer(call, in)
			s.mu.Lock()
			defer s.mu.Unlock()
			for i, e := range in {
				if out.Records[i].ErrorCode != nil || !kpl.IsAggregated(e.Data) {
					continue
				}
				k := aws.ToString(e.PartitionKey)
				s.stored[k] = s.stored[k][:len(s.stored[k])-1] // not the aggregate itself
				subs, derr := kpl.Deaggregate(e.Data)
				if derr != nil {
					t.Error(derr)
				}
				for _, sub := range subs {
					s.stored[sub.PartitionKey] = append(s.stored[sub.PartitionKey], string(sub.Data))
				}
			}
			return out, err
		}
		p := newFakePublisher(t, &fakeKinesis{putRecords: deagg}, WithPublishAggregation(true), WithPublishBackoff(time.Millisecond, 50*time.Millisecond))
		const n, keys = 20000, 40
		recs := keyedRecords(n, keys)
		for i := range recs {
			recs[i].Data = append(recs[i].Data, make([]byte, 100-len(recs[i].Data))...)
		}
		if err := p.PublishBatch(t.Context(), recs); err != nil {
			t.Fatal(err)
		}
		for k, ps := range s.stored {
			for i := range ps {
				ps[i] = strings.TrimRight(ps[i], "\x00")
			}
			s.stored[k] = ps
		}
		checkKeyOrder(t, s.stored, n, keys)
		if f := p.shards.Mispredicted(); f != 0 {
			t.Errorf("%d records mispredicted", f)
		}
	})
}

// TestPublishBatchTimeBudget: a stream that refuses everything fails the batch at its time
// budget, naming every record; throttling alone never fails a record earlier, however often;
// a record refused again and again fails at its own budget, with the later records of its key
// (never sent) and nothing else.
func TestPublishBatchTimeBudget(t *testing.T) {
	t.Run("everything refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeKinesis{putRecords: func(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
				return refuse(in, func(string) bool { return true }), nil
			}}
			p := newFakePublisher(t, f, WithPublishTimeout(7*time.Second))
			start := time.Now()
			err := p.PublishBatch(t.Context(), numbered(600))
			var perr *PublishError
			if !errors.As(err, &perr) || perr.Err != nil || !slices.Equal(perr.Failed, seqInts(0, 600)) {
				t.Fatalf("PublishBatch error = %v, want every record failed by its time budget", err)
			}
			if got := time.Since(start); got != 7*time.Second {
				t.Errorf("PublishBatch returned after %v, want the time budget, 7s", got)
			}
			for _, s := range []string{"600 of 600 records", "WithPublishTimeout 7s", "ProvisionedThroughputExceededException"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	})
	t.Run("throttled 30 times", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			refusals := 0
			f := &fakeKinesis{putRecords: func(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
				return refuse(in, func(p string) bool { refusals++; return p == "3" && refusals < 100 }), nil
			}}
			p := newFakePublisher(t, f, WithPublishBackoff(time.Millisecond, 10*time.Millisecond), WithPublishRetries(0))
			if err := p.PublishBatch(t.Context(), numbered(6)); err != nil {
				t.Fatalf("PublishBatch = %v, want every record written: throttling is retried", err)
			}
			if n := f.callCount(); n < 30 {
				t.Errorf("%d calls: record 3 was throttled fewer than 30 times", n)
			}
		})
	})
	t.Run("one key refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeKinesis{putRecords: func(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
				return refuse(in, among("4")), nil
			}}
			p := newFakePublisher(t, f, WithPublishTimeout(5*time.Second), WithPublishBackoff(time.Millisecond, 10*time.Millisecond))
			start := time.Now()
			err := p.PublishBatch(t.Context(), numbered(9)) // record 4 is key-1's second
			var perr *PublishError
			if !errors.As(err, &perr) || perr.Err != nil || !slices.Equal(perr.Failed, []int{4, 7}) {
				t.Fatalf("PublishBatch error = %v, want records 4 and 7 (key-1's after it) failed", err)
			}
			if got := time.Since(start); got < 5*time.Second || got > 5*time.Second+10*time.Millisecond {
				t.Errorf("PublishBatch returned after %v, want record 4's budget, 5s", got)
			}
			for _, c := range f.sent() {
				if slices.Contains(c, "7") {
					t.Errorf("record 7 was sent before record 4, of its key, was written")
				}
			}
		})
	})
}

// TestPublishBatchRetriesCeiling: refusals other than throttling are resent at most
// WithPublishRetries times.
func TestPublishBatchRetriesCeiling(t *testing.T) {
	for _, retries := range []int{0, 3} {
		t.Run(strconv.Itoa(retries), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeKinesis{putRecords: func(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
					out := refuse(in, among())
					for i, e := range in {
						if _, p := envelope.Decode(e.Data); string(p) == "1" {
							out.Records[i] = types.PutRecordsResultEntry{ErrorCode: aws.String("InternalFailure"), ErrorMessage: aws.String("Internal service failure.")}
						}
					}
					return out, nil
				}}
				p := newFakePublisher(t, f, WithPublishRetries(retries))
				err := p.PublishBatch(t.Context(), distinct(3))
				var perr *PublishError
				if !errors.As(err, &perr) || perr.Err != nil || !slices.Equal(perr.Failed, []int{1}) || perr.ErrorCode != "InternalFailure" {
					t.Fatalf("PublishBatch error = %v, want record 1 failed with InternalFailure", err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("WithPublishRetries %d", retries)) {
					t.Errorf("error %q does not name WithPublishRetries", err)
				}
				sends := 0
				for _, c := range f.sent() {
					if slices.Contains(c, "1") {
						sends++
					}
				}
				if sends != retries+1 {
					t.Errorf("record 1 sent %d times, want %d", sends, retries+1)
				}
			})
		})
	}
}

func TestPublishBatchCancel(t *testing.T) {
	t.Run("during backoff", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		f := &fakeKinesis{putRecords: func(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			cancel()
			return refuse(in, among("1")), nil
		}}
		p := newFakePublisher(t, f, WithPublishBackoff(time.Minute, time.Minute))
		start := time.Now()
		err := p.PublishBatch(ctx, distinct(3))
		if time.Since(start) > 10*time.Second {
			t.Errorf("PublishBatch waited out its backoff after cancellation")
		}
		var perr *PublishError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &perr) || !slices.Equal(perr.Failed, []int{1}) {
			t.Fatalf("PublishBatch error = %v, want context.Canceled with record 1 failed", err)
		}
		if f.callCount() != 1 {
			t.Errorf("%d calls, want 1", f.callCount())
		}
	})
	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		f := &fakeKinesis{}
		p := newFakePublisher(t, f)
		var perr *PublishError
		if err := p.PublishBatch(ctx, numbered(2)); !errors.Is(err, context.Canceled) || !errors.As(err, &perr) || !slices.Equal(perr.Failed, []int{0, 1}) {
			t.Fatalf("PublishBatch error = %v, want context.Canceled with both records failed", err)
		}
		if f.callCount() != 0 || f.lists != 0 {
			t.Errorf("%d calls after cancellation, want 0", f.callCount()+f.lists)
		}
	})
}

func TestPublishBatchCallFails(t *testing.T) {
	t.Run("missing stream", func(t *testing.T) {
		f := &fakeKinesis{putRecords: func(int, []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			return nil, &types.ResourceNotFoundException{Message: aws.String("Stream s not found")}
		}}
		err := newFakePublisher(t, f).PublishBatch(t.Context(), numbered(2))
		var perr *PublishError
		var rnf *types.ResourceNotFoundException
		if !errors.Is(err, ErrStreamNotFound) || !errors.As(err, &rnf) || !errors.As(err, &perr) || len(perr.Failed) != 2 {
			t.Fatalf("PublishBatch error = %v, want ErrStreamNotFound for both records", err)
		}
	})
	t.Run("missing stream listed", func(t *testing.T) {
		f := &fakeKinesis{listShards: func() (*kinesis.ListShardsOutput, error) {
			return nil, &types.ResourceNotFoundException{Message: aws.String("Stream s not found")}
		}}
		err := newFakePublisher(t, f).PublishBatch(t.Context(), numbered(2))
		var perr *PublishError
		if !errors.Is(err, ErrStreamNotFound) || !errors.As(err, &perr) || len(perr.Failed) != 2 || f.callCount() != 0 {
			t.Fatalf("PublishBatch error = %v after %d calls, want ErrStreamNotFound for both records and no PutRecords", err, f.callCount())
		}
	})
	for name, cause := range map[string]error{
		"access denied": &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "no", Fault: smithy.FaultClient},
		"unknown error": errors.New("boom"),
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeKinesis{putRecords: func(int, []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
				return nil, cause
			}}
			err := newFakePublisher(t, f).PublishBatch(t.Context(), distinct(300))
			var perr *PublishError
			if !errors.Is(err, cause) || !errors.As(err, &perr) || !slices.Equal(perr.Failed, seqInts(0, 300)) {
				t.Fatalf("PublishBatch error = %v, want every record failed wrapping %v", err, cause)
			}
			if f.callCount() != 1 {
				t.Errorf("%d calls: a refusal that does not pass was retried", f.callCount())
			}
		})
	}
	t.Run("short answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeKinesis{putRecords: func(int, []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
				return &kinesis.PutRecordsOutput{}, nil
			}}
			mt := newMeters(t)
			err := newFakePublisher(t, f, WithPublishRetries(2), WithPublishMeterProvider(mt.provider)).PublishBatch(t.Context(), distinct(2))
			var perr *PublishError
			if !errors.As(err, &perr) || len(perr.Failed) != 2 || perr.Err != nil || f.callCount() != 3 {
				t.Fatalf("PublishBatch error = %v after %d calls, want both records failed after 3 calls", err, f.callCount())
			}
			if got := mt.sum("kinesub.publish.unconfirmed_resends"); got != 4 {
				t.Errorf("unconfirmed resends = %v, want 4 (2 records resent twice)", got)
			}
		})
	})
}

// TestPublishBatchWritesTwiceOnlyWhenAnswerLost: a call whose answer is lost after the service
// stored its records is resent, and only its records are stored twice, as many as the metric
// counts; a call answered 500 (stored nothing) is resent and nothing is stored twice.
func TestPublishBatchWritesTwiceOnlyWhenAnswerLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &storingFake{rng: rand.New(rand.NewPCG(5, 6)), throttle: 0.2, stored: map[string][]string{}, loseAt: map[int]bool{0: true}}
		failed := false
		f := &fakeKinesis{putRecords: func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			if call == 1 && !failed {
				failed = true
				return nil, &smithy.GenericAPIError{Code: "InternalFailure", Message: "internal", Fault: smithy.FaultServer}
			}
			return s.answer(call, in)
		}}
		mt := newMeters(t)
		p := newFakePublisher(t, f, WithPublishMeterProvider(mt.provider), WithPublishBackoff(time.Millisecond, 10*time.Millisecond))
		const n, keys = 2000, 50
		if err := p.PublishBatch(t.Context(), keyedRecords(n, keys)); err != nil {
			t.Fatal(err)
		}
		lost := map[string]bool{}
		for _, e := range f.calls[0] {
			_, p := envelope.Decode(e.Data)
			lost[string(p)] = true
		}
		twice := 0
		for _, ps := range s.stored {
			seen := map[string]bool{}
			for _, p := range ps {
				if seen[p] {
					twice++
					if !lost[p] {
						t.Errorf("%s stored twice, but its answer was never lost", p)
					}
				}
				seen[p] = true
			}
		}
		if resent := mt.sum("kinesub.publish.unconfirmed_resends"); twice == 0 || float64(twice) > resent {
			t.Errorf("%d records stored twice, %v counted as resent after a lost answer", twice, resent)
		}
	})
}

func TestPublisherConcurrentUse(t *testing.T) {
	f := &fakeKinesis{
		putRecord: func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error) {
			return &kinesis.PutRecordOutput{SequenceNumber: aws.String("1"), ShardId: aws.String("shardId-000000000000")}, nil
		},
		putRecords: func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			return refuse(in, func(p string) bool { return call%3 == 0 && p == "0" }), nil
		},
	}
	p := newFakePublisher(t, f, WithPublishBackoff(time.Millisecond, time.Millisecond))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if err := p.PublishBatch(t.Context(), numbered(5)); err != nil {
					t.Error(err)
				}
				if _, err := p.Publish(t.Context(), "k", []byte("p"), map[string]string{"a": "b"}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// Integration tests against kinesalite.

// readAll reads every record of every shard of stream from TRIM_HORIZON until the shards have
// nothing more to give.
func readAll(t *testing.T, client *kinesis.Client, stream string) []types.Record {
	t.Helper()
	ctx := t.Context()
	shards, err := client.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	var all []types.Record
	for _, s := range shards.Shards {
		it, err := client.GetShardIterator(ctx, Horizon().iteratorInput(streamRef{name: stream}, aws.ToString(s.ShardId)))
		if err != nil {
			t.Fatal(err)
		}
		iter := it.ShardIterator
		for iter != nil {
			out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, out.Records...)
			if len(out.Records) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	return all
}

func TestPublishIntegration(t *testing.T) {
	client := testenv.Kinesis(t)
	stream := testenv.Name(t)
	testenv.CreateStream(t, client, stream, 1)
	p, err := NewPublisher(client, stream)
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{"trace-id": "4bf92f35", "content-type": "application/json"}
	seq1, err := p.Publish(t.Context(), "user-1", []byte(`{"n":1}`), headers)
	if err != nil {
		t.Fatal(err)
	}
	seq2, err := p.Publish(t.Context(), "user-1", []byte("plain"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if seq1 == "" || seq2 == "" || seq1 == seq2 {
		t.Fatalf("sequence numbers %q, %q", seq1, seq2)
	}

	recs := readAll(t, client, stream)
	if len(recs) != 2 {
		t.Fatalf("read %d records, want 2", len(recs))
	}
	h, payload := envelope.Decode(recs[0].Data)
	if aws.ToString(recs[0].SequenceNumber) != seq1 || aws.ToString(recs[0].PartitionKey) != "user-1" ||
		!maps.Equal(h, headers) || string(payload) != `{"n":1}` {
		t.Errorf("first record: sequence %s, key %s, headers %q, payload %q", aws.ToString(recs[0].SequenceNumber), aws.ToString(recs[0].PartitionKey), h, payload)
	}
	// A record without headers is stored bare, as any other producer would write it.
	if aws.ToString(recs[1].SequenceNumber) != seq2 || string(recs[1].Data) != "plain" {
		t.Errorf("second record: sequence %s, data %q", aws.ToString(recs[1].SequenceNumber), recs[1].Data)
	}

	missing, err := NewPublisher(client, stream+"-missing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Publish(t.Context(), "k", []byte("p"), nil); !errors.Is(err, ErrStreamNotFound) {
		t.Errorf("Publish to a missing stream: %v, want ErrStreamNotFound", err)
	}
	if err := missing.PublishBatch(t.Context(), numbered(2)); !errors.Is(err, ErrStreamNotFound) {
		t.Errorf("PublishBatch to a missing stream: %v, want ErrStreamNotFound", err)
	}
}

func TestPublishBatchIntegration(t *testing.T) {
	client := testenv.Kinesis(t)
	stream := testenv.Name(t)
	testenv.CreateStream(t, client, stream, 2)
	p, err := NewPublisher(client, stream)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1200 // kinesalite refuses more than 500 records per call
	records := make([]Record, n)
	for i := range records {
		records[i] = Record{
			PartitionKey: "key-" + strconv.Itoa(i%7),
			Data:         []byte(strconv.Itoa(i)),
			Headers:      map[string]string{"index": strconv.Itoa(i)},
		}
	}
	if err := p.PublishBatch(t.Context(), records); err != nil {
		t.Fatal(err)
	}

	recs := readAll(t, client, stream)
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	seen := make(map[int]bool)
	last := make(map[string]int)
	for _, r := range recs {
		h, payload := envelope.Decode(r.Data)
		i, err := strconv.Atoi(string(payload))
		if err != nil || h["index"] != string(payload) || len(h) != 1 {
			t.Fatalf("record decodes to %q, %q", h, payload)
		}
		key := aws.ToString(r.PartitionKey)
		if key != "key-"+strconv.Itoa(i%7) {
			t.Errorf("record %d has key %q", i, key)
		}
		if prev, ok := last[key]; ok && i < prev {
			t.Errorf("key %s: record %d stored after %d", key, i, prev)
		}
		last[key] = i
		seen[i] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct records, want %d", len(seen), n)
	}
}
