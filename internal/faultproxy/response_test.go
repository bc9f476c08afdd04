package faultproxy

import (
	"encoding/json"
	"hash/crc32"
	"net/http/httptest"
	"strconv"
	"testing"
)

// The SDK classification of these bodies is tested through the emulators; this checks the
// headers the SDK does not look at but the services send.
func TestWriteErrorHeaders(t *testing.T) {
	for _, tc := range []struct {
		kind        Kind
		op          string
		status      int
		contentType string
		typ         string
	}{
		{Throttle, getRecords, 400, "application/x-amz-json-1.1", "ProvisionedThroughputExceededException"},
		{Throttle, kinesisPrefix + "ListShards", 400, "application/x-amz-json-1.1", "LimitExceededException"},
		{InternalFailure, putRecord, 500, "application/x-amz-json-1.1", "InternalFailureException"},
		{ExpiredIterator, getRecords, 400, "application/x-amz-json-1.1", "ExpiredIteratorException"},
		{Throttle, updateItem, 400, "application/x-amz-json-1.0", dynamoDBNamespace + "ProvisionedThroughputExceededException"},
		{Throttle, dynamoDBPrefix + "DescribeTable", 400, "application/x-amz-json-1.0", "com.amazon.coral.availability#ThrottlingException"},
		{InternalFailure, getItem, 500, "application/x-amz-json-1.0", dynamoDBNamespace + "InternalServerError"},
		{ConditionalCheckFailed, updateItem, 400, "application/x-amz-json-1.0", dynamoDBNamespace + "ConditionalCheckFailedException"},
	} {
		t.Run(tc.kind.String()+"/"+tc.op, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, tc.kind, tc.op)
			res := rec.Result()
			if res.StatusCode != tc.status {
				t.Errorf("status = %d, want %d", res.StatusCode, tc.status)
			}
			h := res.Header
			if got := h.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tc.contentType)
			}
			if h.Get("X-Amzn-Requestid") == "" {
				t.Error("no x-amzn-RequestId")
			}
			if h.Get("X-Amzn-Errortype") != "" {
				t.Error("X-Amzn-ErrorType set; the services send the type in the body only")
			}
			if got := h.Get(FaultHeader); got != tc.kind.String() {
				t.Errorf("%s = %q, want %q", FaultHeader, got, tc.kind)
			}
			body := rec.Body.Bytes()
			if got := h.Get("Content-Length"); got != strconv.Itoa(len(body)) {
				t.Errorf("Content-Length = %s, body has %d bytes", got, len(body))
			}
			var b struct {
				Type    string `json:"__type"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(body, &b); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if b.Type != tc.typ || b.Message == "" {
				t.Errorf("body = %s, want __type %q and a message", body, tc.typ)
			}
			crc := h.Get("X-Amz-Crc32")
			if tc.contentType == "application/x-amz-json-1.0" {
				if want := strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10); crc != want {
					t.Errorf("x-amz-crc32 = %q, want %q", crc, want)
				}
			} else if crc != "" {
				t.Errorf("Kinesis response has x-amz-crc32 %q", crc)
			}
		})
	}
}
