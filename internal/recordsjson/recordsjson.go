package recordsjson

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Decoding a GetRecords answer is most of a consumer's CPU: the SDK's generic decoder walks
// every record's fields through its schema, allocates each string, payload and timestamp on
// its own and parses each timestamp with math/big. recordsProtocol decodes the successful
// JSON answers of GetRecords itself, into the same GetRecordsOutput: strings and small
// payloads are copied into shared blocks of a few KiB (as the SDK's own string arena does, so
// that a record kept alive keeps a block, never a page), and pointer fields point into one
// slice each per page. Everything else (errors, other operations, other protocols, an answer
// it does not understand) goes to the SDK's protocol, so the result and the errors are the
// SDK's in every case; a test decodes generated answers both ways and compares them.

// AWSJSON11 is the protocol of the Kinesis client: the only one recordsProtocol decodes.
var AWSJSON11 = smithy.ShapeID{Namespace: "aws.protocols", Name: "awsJson1_1"}

// Fast is the GetRecords call option that installs recordsProtocol.
func Fast(o *kinesis.Options) { install(o, 0) }

// UpTo is Fast for a call asking for at most limit records: the page's
// arrays are made once, for the records the answer can hold, rather than grown from a few
// dozen (growing a page of 10,000 records copied its arrays eight times over, about a quarter
// of a consumer's CPU).
func UpTo(limit int) func(*kinesis.Options) {
	return func(o *kinesis.Options) { install(o, limit) }
}

func install(o *kinesis.Options, limit int) {
	if o.Protocol == nil || o.Protocol.ID() != AWSJSON11 {
		return
	}
	if p, ok := o.Protocol.(recordsProtocol); ok {
		o.Protocol = p.ClientProtocol
	}
	o.Protocol = recordsProtocol{o.Protocol, limit}
}

// recordsProtocol is the client's protocol with GetRecords answers decoded by Decode.
type recordsProtocol struct {
	smithyhttp.ClientProtocol
	limit int // the most records the call asked for; 0 when unknown
}

func (p recordsProtocol) DeserializeResponse(ctx context.Context, schema *smithy.OperationSchema, reg *smithy.TypeRegistry, resp *smithyhttp.Response, out smithy.Deserializable) error {
	o, ok := out.(*kinesis.GetRecordsOutput)
	if !ok || resp.StatusCode < 200 || resp.StatusCode >= 300 || resp.Body == nil {
		return p.ClientProtocol.DeserializeResponse(ctx, schema, reg, resp, out)
	}
	buf, err := ReadBody(resp.Body, resp.ContentLength)
	defer ReleaseBody(buf)
	if err != nil {
		return &smithy.DeserializationError{Err: err}
	}
	if buf.Len() == 0 {
		return nil
	}
	hint := 0
	if p.limit > 0 {
		// No answer holds more than the call asked for, nor more records than its body holds
		// at MinRecordJSON bytes each.
		hint = min(p.limit, buf.Len()/MinRecordJSON+1)
	}
	if err := DecodeHint(buf.Bytes(), o, hint); err != nil {
		// Not an answer this decoder knows: the SDK's decoder says what it makes of it.
		*o = kinesis.GetRecordsOutput{}
		r := *resp.Response
		r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
		return p.ClientProtocol.DeserializeResponse(ctx, schema, reg, &smithyhttp.Response{Response: &r}, out)
	}
	return nil
}

// maxPooledBody bounds the answer buffers kept for reuse: a full page of small records.
const maxPooledBody = 4 << 20

// MaxResponseBytes is the most record data one GetRecords answer carries (10 MiB).
const MaxResponseBytes = 10 << 20

var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// ReadBody reads an answer's body of length bytes (-1: unknown) into a buffer of the pool,
// which ReleaseBody returns once the answer is decoded.
func ReadBody(body io.Reader, length int64) (*bytes.Buffer, error) {
	buf := bodies.Get().(*bytes.Buffer)
	buf.Reset()
	if length > 0 && length < MaxResponseBytes*2 {
		buf.Grow(int(length) + 1) // +1: ReadFrom stops without growing at EOF
	}
	_, err := buf.ReadFrom(body)
	return buf, err
}

func ReleaseBody(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBody {
		buf.Reset()
		bodies.Put(buf)
	}
}

// errNotRecords is what Decode returns for input it leaves to the SDK.
var errNotRecords = errors.New("not a GetRecords answer this decoder reads")

// recordsDecoder holds one answer's decoding state.
type recordsDecoder struct {
	b   []byte
	i   int
	str arena // strings: sequence numbers, partition keys, iterators, shard ids
	dat arena // small payloads
	// recordsHint, if set, is the records a Records array is expected to hold: 64 otherwise.
	recordsHint int
}

// MinRecordJSON is fewer bytes than a record of a GetRecords answer takes: its sequence number
// alone is 56 digits, and it has a key, a payload and an arrival time besides.
const MinRecordJSON = 100

// Decode decodes a GetRecords answer's JSON body into o, as the SDK would.
func Decode(body []byte, o *kinesis.GetRecordsOutput) error {
	return DecodeHint(body, o, 0)
}

// DecodeHint is Decode making room for hint records at once (none: 64, grown as
// needed).
func DecodeHint(body []byte, o *kinesis.GetRecordsOutput, hint int) error {
	d := &recordsDecoder{b: body, recordsHint: hint}
	return d.page(&o.Records, "NextShardIterator", &o.NextShardIterator, &o.MillisBehindLatest, &o.ChildShards)
}

// page decodes the whole input as a page of records: a GetRecords answer or a
// SubscribeToShardEvent, whose member named position says where reading goes on.
func (d *recordsDecoder) page(records *[]types.Record, position string, at **string, behind **int64, children *[]types.ChildShard) error {
	if err := d.object(func(key []byte) error {
		switch string(key) {
		case "Records":
			return d.records(records)
		case position:
			return d.optString(at)
		case "MillisBehindLatest":
			return d.optInt64(behind)
		case "ChildShards":
			return d.childShards(children)
		}
		return d.skip()
	}); err != nil {
		return err
	}
	if d.ws(); d.i != len(d.b) {
		return errNotRecords
	}
	return nil
}

// records decodes a Records array into out. A record's pointer fields point into its entry of
// one slice of the page's, filled once the array is read (appending would move them).
func (d *recordsDecoder) records(out *[]types.Record) error {
	if d.null() {
		return nil
	}
	type fields struct {
		seq, key       string
		at             time.Time
		hasSeq, hasKey bool
		hasTime        bool
	}
	size := 64
	if d.recordsHint > 0 {
		size = d.recordsHint
	}
	recs := make([]types.Record, 0, size)
	all := make([]fields, 0, size)
	err := d.array(func() error {
		var rec types.Record
		var f fields
		err := d.object(func(member []byte) (err error) {
			switch string(member) {
			case "SequenceNumber":
				f.seq, f.hasSeq, err = d.text()
			case "PartitionKey":
				f.key, f.hasKey, err = d.text()
			case "ApproximateArrivalTimestamp":
				f.hasTime, err = d.timestamp(&f.at)
			case "Data":
				err = d.data(&rec.Data)
			case "EncryptionType":
				var s string
				s, _, err = d.text()
				rec.EncryptionType = types.EncryptionType(s)
			default:
				err = d.skip()
			}
			return err
		})
		recs, all = append(recs, rec), append(all, f)
		return err
	})
	if err != nil {
		return err
	}
	for i := range recs {
		f := &all[i]
		if f.hasSeq {
			recs[i].SequenceNumber = &f.seq
		}
		if f.hasKey {
			recs[i].PartitionKey = &f.key
		}
		if f.hasTime {
			recs[i].ApproximateArrivalTimestamp = &f.at
		}
	}
	*out = recs
	return nil
}

// childShards decodes a ChildShards array into out (at a shard's end; rare, so plainly).
func (d *recordsDecoder) childShards(out *[]types.ChildShard) error {
	if d.null() {
		return nil
	}
	*out = []types.ChildShard{}
	return d.array(func() error {
		var c types.ChildShard
		err := d.object(func(key []byte) error {
			switch string(key) {
			case "ShardId":
				return d.optString(&c.ShardId)
			case "ParentShards":
				if d.null() {
					return nil
				}
				c.ParentShards = []string{}
				return d.array(func() error {
					s, _, err := d.text()
					c.ParentShards = append(c.ParentShards, s)
					return err
				})
			case "HashKeyRange":
				if d.null() {
					return nil
				}
				c.HashKeyRange = &types.HashKeyRange{}
				return d.object(func(key []byte) error {
					switch string(key) {
					case "StartingHashKey":
						return d.optString(&c.HashKeyRange.StartingHashKey)
					case "EndingHashKey":
						return d.optString(&c.HashKeyRange.EndingHashKey)
					}
					return d.skip()
				})
			}
			return d.skip()
		})
		*out = append(*out, c)
		return err
	})
}

// DecodeEvent decodes a SubscribeToShardEvent's JSON payload into ev, as the SDK would.
func DecodeEvent(payload []byte, ev *types.SubscribeToShardEvent) error {
	// An event holds a record or a few while records trickle in: blocks and slices sized to
	// the payload, not to a page.
	size := min(len(payload), arenaBlock)
	d := &recordsDecoder{b: payload, str: arena{size: size}, dat: arena{size: size}, recordsHint: min(1+len(payload)/256, 64)}
	return d.page(&ev.Records, "ContinuationSequenceNumber", &ev.ContinuationSequenceNumber, &ev.MillisBehindLatest, &ev.ChildShards)
}
