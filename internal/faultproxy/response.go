package faultproxy

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
)

// FaultHeader names the response header that marks an injected error response with its Kind.
// The services never send it; it only helps when reading captured traffic.
const FaultHeader = "X-Faultproxy-Fault"

// apiError is an error response as the service would send it.
type apiError struct {
	status int
	typ    string // the body's __type
	msg    string
}

// The SDK's JSON protocols (smithy-go awsjson) take the error code from the X-Amzn-ErrorType
// header if present, else from the body's __type, strip any "namespace#" prefix and ":suffix",
// and look the rest up among the service's modeled errors. The bodies follow the services (and
// the emulators, which copy them): Kinesis sends bare type names, DynamoDB namespaced ones, and
// neither sends X-Amzn-ErrorType.
const dynamoDBNamespace = "com.amazonaws.dynamodb.v20120810#"

// kinesisDataOps are the Kinesis operations whose throttling error is
// ProvisionedThroughputExceededException; the control plane answers LimitExceededException.
var kinesisDataOps = map[string]bool{
	kinesisPrefix + "GetRecords":       true,
	kinesisPrefix + "GetShardIterator": true,
	kinesisPrefix + "PutRecord":        true,
	kinesisPrefix + "PutRecords":       true,
}

// dynamoDBItemOps are the DynamoDB operations whose throttling error is
// ProvisionedThroughputExceededException; table and account operations answer
// ThrottlingException.
var dynamoDBItemOps = map[string]bool{
	dynamoDBPrefix + "GetItem":               true,
	dynamoDBPrefix + "PutItem":               true,
	dynamoDBPrefix + "UpdateItem":            true,
	dynamoDBPrefix + "DeleteItem":            true,
	dynamoDBPrefix + "Query":                 true,
	dynamoDBPrefix + "Scan":                  true,
	dynamoDBPrefix + "BatchGetItem":          true,
	dynamoDBPrefix + "BatchWriteItem":        true,
	dynamoDBPrefix + "TransactGetItems":      true,
	dynamoDBPrefix + "TransactWriteItems":    true,
	dynamoDBPrefix + "ExecuteStatement":      true,
	dynamoDBPrefix + "BatchExecuteStatement": true,
	dynamoDBPrefix + "ExecuteTransaction":    true,
}

// errorFor returns the error response for fault kind k on operation op. k must be one of the
// kinds that answer without forwarding, and must apply to op.
func errorFor(k Kind, op string) apiError {
	if serviceOf(op) == kinesisService {
		switch k {
		case Throttle:
			if kinesisDataOps[op] {
				return apiError{http.StatusBadRequest, "ProvisionedThroughputExceededException", "Rate exceeded for shard."}
			}
			return apiError{http.StatusBadRequest, "LimitExceededException", "Rate exceeded for stream."}
		case InternalFailure:
			// InternalFailureException is the modeled error; a bare "InternalFailure" would
			// reach callers as a generic API error they cannot match with errors.As.
			return apiError{http.StatusInternalServerError, "InternalFailureException", "Internal service failure."}
		case ExpiredIterator:
			return apiError{http.StatusBadRequest, "ExpiredIteratorException", "Iterator expired. The iterator was created more than 300000 milliseconds ago."}
		}
	} else {
		switch k {
		case Throttle:
			if dynamoDBItemOps[op] {
				return apiError{http.StatusBadRequest, dynamoDBNamespace + "ProvisionedThroughputExceededException",
					"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."}
			}
			return apiError{http.StatusBadRequest, "com.amazon.coral.availability#ThrottlingException", "Rate of requests exceeds the allowed throughput."}
		case InternalFailure:
			return apiError{http.StatusInternalServerError, dynamoDBNamespace + "InternalServerError", "Internal server error"}
		case ConditionalCheckFailed:
			return apiError{http.StatusBadRequest, dynamoDBNamespace + "ConditionalCheckFailedException", "The conditional request failed"}
		}
	}
	panic(fmt.Sprintf("faultproxy: no error response for %v on %s", k, op))
}

// writeError answers the request with the error for fault kind k, with the headers the
// service sends: its JSON content type, a request id, and for DynamoDB the body's CRC32 (the
// DynamoDB client verifies it on successful responses only, but a faithful one costs nothing).
func writeError(w http.ResponseWriter, k Kind, op string) {
	e := errorFor(k, op)
	body, err := json.Marshal(struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{e.typ, e.msg})
	if err != nil {
		panic(err) // two strings always marshal
	}
	h := w.Header()
	if serviceOf(op) == kinesisService {
		h.Set("Content-Type", "application/x-amz-json-1.1")
		h.Set("x-amzn-RequestId", uuid())
		h.Set("x-amz-id-2", randomBase64(72))
	} else {
		h.Set("Content-Type", "application/x-amz-json-1.0")
		h.Set("x-amzn-RequestId", rand.Text()+rand.Text())
		h.Set("x-amz-crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set(FaultHeader, k.String())
	w.WriteHeader(e.status)
	_, _ = w.Write(body) // the client going away is not the proxy's error
}

// Request ids come from crypto/rand, not the decision source, so they never shift decisions.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func randomBase64(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
