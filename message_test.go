package kinesub

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/lease"
)

// TestKeptMessageKeepsItsRecordOnly: a Message kept alive keeps its record and at most a block
// of the page's decoded data, never the page. One message is kept from each of 20 pages of
// 10,000 records of 100 B (the rest acked); what the 20 keep alive, measured as the heap they
// free once dropped, stays under 1 MiB (a whole page is about 3.5 MiB). The records are read
// through the SDK and kinesub's GetRecords decoder, from a kinesistest server in the process.
func TestKeptMessageKeepsItsRecordOnly(t *testing.T) {
	const pages, perPage, size = 20, 10_000, 100
	settled := noLeaks(t)
	srv := kinesistest.NewServer()
	t.Cleanup(srv.Close)
	client := srv.Client()
	ctx := context.Background()
	_, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("kept"), ShardCount: aws.Int32(1)})
	require.NoError(t, err)
	require.NoError(t, kinesis.NewStreamExistsWaiter(client).Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String("kept")}, time.Minute))
	data := make([]byte, size)
	for batch := range pages * perPage / 500 {
		entries := make([]types.PutRecordsRequestEntry, 500)
		for i := range entries {
			entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprintf("k%d", (batch*500+i)%97)), Data: data}
		}
		out, err := client.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("kept"), Records: entries})
		require.NoError(t, err)
		require.Zero(t, aws.ToInt32(out.FailedRecordCount))
	}

	sub, err := Subscribe(ctx, client, "kept", WithLeaseStore(lease.NewMemory()), WithStartAt(Horizon()),
		WithBatchSize(perPage), WithMaxInFlight(pages*perPage), WithPollInterval(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	var kept []*Message
	n := 0
	for b, err := range sub.Batches(ctx) {
		require.NoError(t, err)
		ms := b.Messages()
		kept = append(kept, ms[0]) // acked too: what the reference alone keeps is measured
		require.NoError(t, b.Ack(ctx))
		if n += len(ms); n == pages*perPage {
			break
		}
	}
	require.Len(t, kept, pages, "one page a batch")
	// Measured with nothing else running, so that the heap moves only by what the kept
	// messages held: the readers would go on polling and allocating meanwhile, and the server's
	// and the client's connection goroutines, ending after Close returned, free the buffers of
	// the last pages they carried (about a page's answer: as much as the bound).
	require.NoError(t, sub.Close(ctx))
	srv.Close()
	client.Options().HTTPClient.(*http.Client).CloseIdleConnections()
	settled()
	withKept := liveHeap()
	again := liveHeap() // what moves without the kept messages moving: the rest of the process
	first := len(kept[0].Data())
	kept = nil
	without := liveHeap()
	retained := int64(min(withKept, again)) - int64(without)
	t.Logf("%d kept messages retain %d KiB (%d B of data each); the heap moved by %d KiB meanwhile",
		pages, retained>>10, first, (int64(withKept)-int64(again))>>10)
	require.Less(t, retained, int64(1<<20), "20 kept messages retain their pages")
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMessageFieldsRoundTrip: what a Message is built with is what its accessors return,
// including the cases its compact form keeps apart: nil and empty payloads, keys and sequence
// numbers too long for its length fields, headers and KPL positions.
func TestMessageFieldsRoundTrip(t *testing.T) {
	long := func(n int) string { return strings.Repeat("k", n) }
	for _, tc := range []struct {
		name     string
		data     []byte
		key, seq string
		headers  map[string]string
		sub      int32
	}{
		{name: "plain", data: []byte("payload"), key: "key", seq: "49590338271490256608559692538361571095921575989136588898"},
		{name: "nil data", key: "key", seq: "1"},
		{name: "empty data", data: []byte{}, key: "key", seq: "1"},
		{name: "empty key and sequence number", data: []byte("x")},
		{name: "longest short key", data: []byte("x"), key: long(math.MaxUint16), seq: long(math.MaxUint8)},
		{name: "long key", data: []byte("x"), key: long(math.MaxUint16 + 1), seq: "2"},
		{name: "long sequence number", data: []byte("x"), key: "k", seq: long(math.MaxUint8 + 1)},
		{name: "headers and a KPL position", data: []byte("x"), key: "k", seq: "3", headers: map[string]string{"a": "b"}, sub: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetched(&shardPage{}, 1)
			m := f.add()
			m.setData(tc.data)
			m.setKey(tc.key)
			m.setSeq(tc.seq)
			if tc.headers != nil || tc.sub != 0 {
				m.extra().headers, m.extra().sub = tc.headers, tc.sub
			}
			require.Equal(t, tc.data, m.Data())
			require.Equal(t, tc.data == nil, m.Data() == nil, "nil and empty payloads stay apart")
			require.Equal(t, tc.key, m.PartitionKey())
			require.Equal(t, tc.seq, m.SequenceNumber())
			require.Equal(t, tc.headers, m.Headers())
			require.Equal(t, int(tc.sub), m.SubSequenceNumber())
			require.Len(t, m.Data(), cap(m.Data()), "appending to Data cannot write into a neighbour's bytes")
		})
	}
	require.Equal(t, uintptr(64), unsafe.Sizeof(Message{}), "a Message is a cache line")
}
