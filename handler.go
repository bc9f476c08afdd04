package kinesub

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// maxSeekBody bounds the body SeekHandler reads: the longest position text, a sequence position
// with a 128-character shard id and a 128-digit sequence number, is under 300 bytes.
const maxSeekBody = 1 << 10

// SeekHandler returns an HTTP handler that repositions the subscription behind seeker, for an
// operator or an admin tool:
//
//	curl -X POST --data horizon http://127.0.0.1:8080/seek
//	curl -X POST 'http://127.0.0.1:8080/seek?to=timestamp:2026-12-02T10:00:00Z'
//	curl -X POST --data sequence:shardId-000000000001:4959033827149025660855969253 http://127.0.0.1:8080/seek
//
// The request is a POST whose position, in the form Position.String and ParsePosition use, is
// the body (taken as plain text whatever its Content-Type, at most 1 KiB) or the query
// parameter "to", not both. In a query, write a timestamp in UTC with "Z" or escape its "+",
// which a query otherwise reads as a space. The answers are:
//
//   - 204 No Content: Seek returned nil; the subscription reads from the new position.
//   - 400 Bad Request: no position, an unreadable one (the ParsePosition error is the body), or a
//     sequence number the service rejected (Kinesis's InvalidArgumentException).
//   - 404 Not Found: the stream has no such shard (ErrUnknownShard).
//   - 405 Method Not Allowed, with "Allow: POST": any other method.
//   - 409 Conflict: the shard is not read here: another subscriber holds its lease
//     (ErrShardNotOwned; ask the instance that owns it) or it was read to its end after a
//     reshard (ErrShardFinished; nothing is left to seek in it).
//   - 413 Request Entity Too Large: a body over 1 KiB.
//   - 503 Service Unavailable: the subscription is closed (ErrClosed).
//   - 504 Gateway Timeout: a call to Kinesis did not answer in time (WithRequestTimeout).
//   - 500 Internal Server Error: any other failure.
//
// Error bodies are text/plain. Seek runs under the request's context, so a client that hangs up
// abandons the wait (not the seek itself, which the shards' readers complete).
//
// The handler checks nothing about the caller: whoever reaches it can replay or skip the
// stream. Serve it only behind the service's own authentication and authorization, or on a
// loopback address. It is safe for concurrent use.
func SeekHandler(seeker *Seeker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "kinesub: seek takes a POST", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSeekBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "kinesub: a position is at most 1 KiB", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "kinesub: reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		text := strings.TrimSpace(string(body))
		if q, ok := r.URL.Query()["to"]; ok {
			if text != "" || len(q) != 1 {
				http.Error(w, "kinesub: give one position, in the body or in ?to=, not both", http.StatusBadRequest)
				return
			}
			text = q[0]
		}
		if text == "" {
			http.Error(w, "kinesub: no position: POST horizon, latest, timestamp:<RFC 3339 time>, sequence:<shard id>:<sequence number> or after:<shard id>:<sequence number>", http.StatusBadRequest)
			return
		}
		p, err := ParsePosition(text)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := seeker.Seek(r.Context(), p); err != nil {
			http.Error(w, err.Error(), seekStatus(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// seekStatus maps a Seek error to the status SeekHandler answers with.
func seekStatus(err error) int {
	var invalid *types.InvalidArgumentException
	switch {
	case errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrUnknownShard):
		return http.StatusNotFound
	case errors.Is(err, ErrShardNotOwned), errors.Is(err, ErrShardFinished):
		return http.StatusConflict
	case errors.Is(err, ErrInvalidPosition), errors.As(err, &invalid):
		return http.StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
