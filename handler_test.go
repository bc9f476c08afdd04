package kinesub

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// serve sends a request to h and returns the response.
func serve(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // what curl --data sends
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestSeekHandler covers every answer of SeekHandler, against a subscription to a fake stream
// whose shard 0 is read here, shard 1 is leased by another owner, and shard 2 was split (into
// shard 3) and read to its end here. It runs in a synctest bubble, so that "nothing moved" is
// checked after the time it would have taken to move.
func TestSeekHandler(t *testing.T) {
	synctest.Test(t, testSeekHandler)
}

func testSeekHandler(t *testing.T) {
	f := newFakeStream("admin", 3)
	now := time.Now()
	seqs := f.add(0, now, "a", "b", "c")
	f.add(1, now, "x")
	oldSeq := f.add(2, now, "old")[0]
	f.split(2)
	ids := []string{f.shards[0].id, f.shards[1].id, f.shards[2].id}

	const (
		hang = "777" // GetShardIterator at this sequence number never answers
		fail = "666" // and at this one fails
	)
	f.setHooks(nil, func(ctx context.Context, in *kinesis.GetShardIteratorInput) error {
		switch aws.ToString(in.StartingSequenceNumber) {
		case hang:
			<-ctx.Done()
			return ctx.Err()
		case fail:
			return errors.New("connection reset by peer")
		}
		return nil
	})
	store := lease.NewMemory()
	holdAsPeer(t, store, "admin", "other", peerLive, ids[1])
	sub := subscribeFake(t, f, fakeOpts(WithLeaseStore(store), WithStartAt(Horizon()), WithRequestTimeout(200*time.Millisecond))...)
	h := SeekHandler(sub.Seeker())

	var got []string
	for len(got) < 4 {
		m := recv(t, sub, 1, true)[0]
		got = append(got, m.ShardID()+"/"+string(m.Data()))
	}
	require.ElementsMatch(t, []string{ids[0] + "/a", ids[0] + "/b", ids[0] + "/c", ids[2] + "/old"}, got)
	eventually(t, 5*time.Second, "shard 2 finished", func() bool {
		return readLease(t, store, "admin", ids[2]).Checkpoint.Sequence == lease.ShardEnd
	})

	for _, tt := range []struct {
		name, method, target, body string
		status                     int
		contains                   string
	}{
		{"get", http.MethodGet, "/seek", "", http.StatusMethodNotAllowed, "POST"},
		{"put", http.MethodPut, "/seek", "horizon", http.StatusMethodNotAllowed, "POST"},
		{"too big", http.MethodPost, "/seek", strings.Repeat("h", 2000), http.StatusRequestEntityTooLarge, "1 KiB"},
		{"empty", http.MethodPost, "/seek", "", http.StatusBadRequest, "no position"},
		{"empty query", http.MethodPost, "/seek?to=", "", http.StatusBadRequest, "no position"},
		{"unreadable", http.MethodPost, "/seek", "yesterday", http.StatusBadRequest, `invalid position "yesterday"`},
		{"form-encoded", http.MethodPost, "/seek", "to=horizon", http.StatusBadRequest, "invalid position"},
		{"body and query", http.MethodPost, "/seek?to=latest", "horizon", http.StatusBadRequest, "not both"},
		{"two queries", http.MethodPost, "/seek?to=latest&to=horizon", "", http.StatusBadRequest, "not both"},
		{"bad timestamp", http.MethodPost, "/seek?to=timestamp:2026-12-02T10:00:00+01:00", "", http.StatusBadRequest, "RFC 3339"},
		{"unknown shard", http.MethodPost, "/seek", "sequence:shardId-000000000099:1", http.StatusNotFound, "unknown shard"},
		{"not owned", http.MethodPost, "/seek", "sequence:" + ids[1] + ":1", http.StatusConflict, "not owned"},
		{"finished", http.MethodPost, "/seek", "sequence:" + ids[2] + ":" + oldSeq, http.StatusConflict, "finished"},
		{"rejected sequence", http.MethodPost, "/seek", "sequence:" + ids[0] + ":12345", http.StatusBadRequest, "InvalidArgumentException"},
		{"timeout", http.MethodPost, "/seek", "sequence:" + ids[0] + ":" + hang, http.StatusGatewayTimeout, "deadline exceeded"},
		{"failure", http.MethodPost, "/seek", "sequence:" + ids[0] + ":" + fail, http.StatusInternalServerError, "connection reset"},
	} {
		// No subtests: t.Run is not allowed in a bubble.
		rec := serve(h, tt.method, tt.target, tt.body)
		assert.Equal(t, tt.status, rec.Code, "%s: body: %s", tt.name, rec.Body)
		assert.Contains(t, rec.Body.String(), tt.contains, tt.name)
		if tt.status == http.StatusMethodNotAllowed {
			assert.Equal(t, http.MethodPost, rec.Header().Get("Allow"), tt.name)
		}
	}

	// None of the failed seeks moved anything.
	quietFor(t, sub, 200*time.Millisecond)

	// 204: in the body, with surrounding whitespace, and in the query.
	rec := serve(h, http.MethodPost, "/seek", " sequence:"+ids[0]+":"+seqs[1]+"\n")
	require.Equal(t, http.StatusNoContent, rec.Code, "body: %s", rec.Body)
	require.Empty(t, rec.Body.String())
	require.Equal(t, "b", string(recv(t, sub, 1, true)[0].Data()))
	require.Equal(t, "c", string(recv(t, sub, 1, true)[0].Data()))

	rec = serve(h, http.MethodPost, "/seek?to="+url.QueryEscape(AtTimestamp(now).String()), "")
	require.Equal(t, http.StatusNoContent, rec.Code, "body: %s", rec.Body)
	got = nil
	for range 3 { // shard 0 from its start; shard 3, the child, is empty; shard 2 is finished
		m := recv(t, sub, 1, true)[0]
		got = append(got, m.ShardID()+"/"+string(m.Data()))
	}
	require.Equal(t, []string{ids[0] + "/a", ids[0] + "/b", ids[0] + "/c"}, got)
	quietFor(t, sub, 200*time.Millisecond)

	// 503 once closed.
	require.NoError(t, sub.Close(context.Background()))
	rec = serve(h, http.MethodPost, "/seek", "horizon")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, "body: %s", rec.Body)
	require.Contains(t, rec.Body.String(), "closed")
}

// quietFor lets d pass in a synctest bubble, then fails if a message is ready. Time in the
// bubble advances only when every goroutine is blocked, so whatever the subscriber would
// deliver within d is delivered by then.
func quietFor(t *testing.T, sub *Subscriber, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	synctest.Wait()
	none(t, sub)
}
