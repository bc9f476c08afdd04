package kinesub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
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

	"github.com/gostream/kinesub/internal/kinesisiface"
	"github.com/gostream/kinesub/internal/testenv"
)

// fakeKinesis answers PutRecord and PutRecords from functions and records every PutRecords
// call; any other method panics (the embedded interface is nil).
type fakeKinesis struct {
	kinesisiface.Kinesis

	putRecord  func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error)
	putRecords func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error)

	mu    sync.Mutex
	calls [][]types.PutRecordsRequestEntry
}

func (f *fakeKinesis) PutRecord(ctx context.Context, in *kinesis.PutRecordInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	return f.putRecord(in)
}

func (f *fakeKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	if aws.ToString(in.StreamName) != "s" {
		return nil, fmt.Errorf("fake: stream %q", aws.ToString(in.StreamName))
	}
	if len(in.Records) > maxBatchRecords {
		return nil, fmt.Errorf("fake: %d records in one call", len(in.Records))
	}
	size := 0
	for i := range in.Records {
		size += entrySize(&in.Records[i])
	}
	if size > maxBatchBytes {
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
			_, p := decodeEnvelope(e.Data)
			ps = append(ps, string(p))
		}
		out = append(out, ps)
	}
	return out
}

// refuse answers a PutRecords call, refusing the entries whose payload bad selects.
func refuse(entries []types.PutRecordsRequestEntry, bad func(payload string) bool) *kinesis.PutRecordsOutput {
	out := &kinesis.PutRecordsOutput{FailedRecordCount: aws.Int32(0)}
	for i, e := range entries {
		_, p := decodeEnvelope(e.Data)
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

func seq(from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, strconv.Itoa(i))
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
		{"full ranges", "s", []PublisherOption{WithPublishRetries(0), WithPublishBackoff(time.Millisecond, time.Millisecond)}, ""},
		{"upper ranges", "s", []PublisherOption{WithPublishRetries(100), WithPublishBackoff(time.Minute, 5*time.Minute)}, ""},
		{"empty stream", "", nil, "NewPublisher stream"},
		{"stream with space", "my stream", nil, "NewPublisher stream"},
		{"stream too long", strings.Repeat("s", 129), nil, "NewPublisher stream"},
		{"negative retries", "s", []PublisherOption{WithPublishRetries(-1)}, "WithPublishRetries"},
		{"too many retries", "s", []PublisherOption{WithPublishRetries(101)}, "WithPublishRetries"},
		{"zero backoff", "s", []PublisherOption{WithPublishBackoff(0, time.Second)}, "WithPublishBackoff"},
		{"max below min", "s", []PublisherOption{WithPublishBackoff(time.Second, time.Millisecond)}, "WithPublishBackoff"},
		{"min too long", "s", []PublisherOption{WithPublishBackoff(2*time.Minute, 3*time.Minute)}, "WithPublishBackoff"},
		{"max too long", "s", []PublisherOption{WithPublishBackoff(time.Second, time.Hour)}, "WithPublishBackoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPublisher(&fakeKinesis{}, tc.stream, tc.opts...)
			if tc.option == "" {
				if err != nil || p == nil {
					t.Fatalf("newPublisher = %v, %v; want a publisher", p, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.option+"(") {
				t.Fatalf("newPublisher error = %v, want ErrInvalidOption naming %s", err, tc.option)
			}
		})
	}
	if _, err := NewPublisher(nil, "s"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewPublisher(nil client) error = %v, want ErrInvalidOption", err)
	}
}

func TestPublishRejectsInvalidRecords(t *testing.T) {
	maxData := bytes.Repeat([]byte("x"), maxRecordBytes-1)
	for _, tc := range []struct {
		name string
		rec  Record
		err  error // also wrapped, besides ErrInvalidRecord
	}{
		{"empty key", Record{PartitionKey: "", Data: []byte("p")}, nil},
		{"key of 257 characters", Record{PartitionKey: strings.Repeat("k", 257), Data: []byte("p")}, nil},
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
			if len(f.calls) != 0 {
				t.Errorf("PublishBatch made %d calls for a batch with an invalid record", len(f.calls))
			}
		})
	}
}

func TestPublishLimitsAreInclusive(t *testing.T) {
	f := &fakeKinesis{putRecord: func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error) {
		return &kinesis.PutRecordOutput{SequenceNumber: aws.String("1")}, nil
	}}
	p := newFakePublisher(t, f)
	for _, r := range []Record{
		{PartitionKey: "k", Data: bytes.Repeat([]byte("x"), maxRecordBytes-1)},
		{PartitionKey: strings.Repeat("é", 256), Data: []byte("p")}, // 256 characters, 512 bytes
	} {
		if _, err := p.Publish(t.Context(), r.PartitionKey, r.Data, r.Headers); err != nil {
			t.Errorf("Publish(key of %d bytes, %d bytes of data) = %v", len(r.PartitionKey), len(r.Data), err)
		}
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
	h, payload := decodeEnvelope(got.Data)
	if !maps.Equal(h, headers) || string(payload) != "hello" {
		t.Errorf("record decodes to %q, %q", h, payload)
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
		if err := p.PublishBatch(t.Context(), numbered(10)); err != nil {
			t.Fatal(err)
		}
		want := [][]string{seq(0, 10), {"2", "5", "7"}, {"5"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("calls sent %q, want %q", got, want)
		}
		// The resent entries keep their partition keys.
		for _, e := range f.calls[1] {
			_, p := decodeEnvelope(e.Data)
			n, _ := strconv.Atoi(string(p))
			if want := "key-" + strconv.Itoa(n%3); aws.ToString(e.PartitionKey) != want {
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
			rs[i] = Record{PartitionKey: "k", Data: append(d, bytes.Repeat([]byte{' '}, size-len(d))...)}
		}
		return rs
	}
	for _, tc := range []struct {
		name    string
		records []Record
		sizes   []int
	}{
		{"none", nil, nil},
		{"one", numbered(1), []int{1}},
		{"exactly 500", numbered(500), []int{500}},
		{"1200 by count", numbered(1200), []int{500, 500, 200}},
		{"exactly 5 MiB per call", big(11, maxRecordBytes-1), []int{5, 5, 1}},
		{"by size", big(12, 1_000_000), []int{5, 5, 2}},
		{"one byte over 5 MiB", append(big(5, maxRecordBytes-1), Record{PartitionKey: "k", Data: []byte("5")}), []int{5, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeKinesis{}
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
			if !slices.Equal(sizes, tc.sizes) {
				t.Errorf("call sizes %v, want %v", sizes, tc.sizes)
			}
			if !slices.Equal(all, seq(0, len(tc.records))) {
				t.Errorf("records sent out of order or lost: %d sent of %d", len(all), len(tc.records))
			}
		})
	}
}

func TestPublishBatchGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeKinesis{putRecords: func(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			return refuse(in, among("3", "4")), nil
		}}
		p := newFakePublisher(t, f, WithPublishRetries(3))
		start := time.Now()
		err := p.PublishBatch(t.Context(), numbered(600))
		elapsed := time.Since(start)

		var perr *PublishError
		if !errors.As(err, &perr) {
			t.Fatalf("PublishBatch error = %v, want a *PublishError", err)
		}
		// The refused records, then the second call's 100 records, which were never sent.
		if want := append([]int{3, 4}, seqInts(500, 600)...); !slices.Equal(perr.Failed, want) {
			t.Errorf("Failed = %v, want %v", perr.Failed, want)
		}
		if perr.ErrorCode != "ProvisionedThroughputExceededException" || perr.Err != nil {
			t.Errorf("ErrorCode %q, Err %v", perr.ErrorCode, perr.Err)
		}
		for _, s := range []string{"102 of 600 records", "after 4 attempts", "ProvisionedThroughputExceededException"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
		want := [][]string{seq(0, 500), {"3", "4"}, {"3", "4"}, {"3", "4"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("calls sent %q, want %q", got, want)
		}
		// Default backoff: 100ms min, doubling ceilings 100ms, 200ms, 400ms.
		if elapsed < 300*time.Millisecond || elapsed > 700*time.Millisecond {
			t.Errorf("3 backoffs took %v, want 300ms to 700ms", elapsed)
		}
	})
}

func seqInts(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func TestPublishBatchNoRetries(t *testing.T) {
	f := &fakeKinesis{putRecords: func(_ int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
		return refuse(in, among("1")), nil
	}}
	p := newFakePublisher(t, f, WithPublishRetries(0))
	var perr *PublishError
	if err := p.PublishBatch(t.Context(), numbered(3)); !errors.As(err, &perr) || !slices.Equal(perr.Failed, []int{1}) {
		t.Fatalf("PublishBatch error = %v, want record 1 failed", err)
	}
	if len(f.calls) != 1 {
		t.Errorf("%d calls, want 1", len(f.calls))
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
		err := p.PublishBatch(ctx, numbered(501))
		if time.Since(start) > 10*time.Second {
			t.Errorf("PublishBatch waited out its backoff after cancellation")
		}
		var perr *PublishError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &perr) || !slices.Equal(perr.Failed, []int{1, 500}) {
			t.Fatalf("PublishBatch error = %v, want context.Canceled with records 1 and 500 failed", err)
		}
		if len(f.calls) != 1 {
			t.Errorf("%d calls, want 1", len(f.calls))
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
		if len(f.calls) != 0 {
			t.Errorf("%d calls after cancellation, want 0", len(f.calls))
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
	t.Run("second call", func(t *testing.T) {
		boom := errors.New("connection reset")
		f := &fakeKinesis{putRecords: func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			if call == 1 {
				return nil, boom
			}
			return refuse(in, among()), nil
		}}
		err := newFakePublisher(t, f).PublishBatch(t.Context(), numbered(700))
		var perr *PublishError
		if !errors.Is(err, boom) || !errors.As(err, &perr) || !slices.Equal(perr.Failed, seqInts(500, 700)) {
			t.Fatalf("PublishBatch error = %v, want records 500 to 699 failed", err)
		}
	})
	t.Run("short answer", func(t *testing.T) {
		f := &fakeKinesis{putRecords: func(int, []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			return &kinesis.PutRecordsOutput{}, nil
		}}
		var perr *PublishError
		if err := newFakePublisher(t, f).PublishBatch(t.Context(), numbered(2)); !errors.As(err, &perr) || len(perr.Failed) != 2 || perr.Err == nil {
			t.Fatalf("PublishBatch error = %v, want both records failed", err)
		}
	})
}

func TestPublishBackoff(t *testing.T) {
	c := publisherConfig{backoffMin: 10 * time.Millisecond, backoffMax: 100 * time.Millisecond}
	for retry, ceil := range []time.Duration{10, 20, 40, 80, 100, 100} {
		ceil *= time.Millisecond
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 2000 {
			d := c.backoff(retry)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < c.backoffMin || hi > ceil {
			t.Errorf("backoff(%d) in [%v, %v], want within [%v, %v]", retry, lo, hi, c.backoffMin, ceil)
		}
		if retry > 0 && hi-lo < (ceil-c.backoffMin)/2 {
			t.Errorf("backoff(%d) in [%v, %v]: too little jitter for [%v, %v]", retry, lo, hi, c.backoffMin, ceil)
		}
	}
	big := publisherConfig{backoffMin: time.Minute, backoffMax: 5 * time.Minute}
	if d := big.backoff(maxPublishRetries); d < time.Minute || d > 5*time.Minute {
		t.Errorf("backoff(%d) = %v, want within [1m, 5m]", maxPublishRetries, d)
	}
}

func TestPublisherConcurrentUse(t *testing.T) {
	f := &fakeKinesis{
		putRecord: func(*kinesis.PutRecordInput) (*kinesis.PutRecordOutput, error) {
			return &kinesis.PutRecordOutput{SequenceNumber: aws.String("1")}, nil
		},
		putRecords: func(call int, in []types.PutRecordsRequestEntry) (*kinesis.PutRecordsOutput, error) {
			return refuse(in, func(p string) bool { return call%3 == 0 && p == "0" }), nil
		},
	}
	p := newFakePublisher(t, f, WithPublishBackoff(time.Millisecond, time.Millisecond), WithPublishRetries(100))
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
	h, payload := decodeEnvelope(recs[0].Data)
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
		h, payload := decodeEnvelope(r.Data)
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
