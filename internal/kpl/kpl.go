// Package kpl reads records aggregated by the Kinesis Producer Library (KPL) and the hash
// keys that place records in shards. It imports nothing of the kinesub package.
package kpl

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
)

// Magic starts every record that the Kinesis Producer Library aggregated.
var Magic = []byte{0xF3, 0x89, 0x9A, 0xC2}

// IsAggregated reports whether data is a KPL-aggregated record.
func IsAggregated(data []byte) bool { return bytes.HasPrefix(data, Magic) }

// A record aggregated by the Kinesis Producer Library (KPL) is the magic bytes F3 89 9A C2, a
// protobuf AggregatedRecord, and the MD5 digest of that protobuf:
//
//	message AggregatedRecord {
//	  repeated string partition_key_table     = 1;
//	  repeated string explicit_hash_key_table = 2;
//	  repeated Record records                 = 3;
//	}
//	message Record {
//	  required uint64 partition_key_index     = 1;
//	  optional uint64 explicit_hash_key_index = 2;
//	  required bytes  data                    = 3;
//	  repeated Tag    tags                    = 4;
//	}
//	message Tag {
//	  required string key   = 1;
//	  optional string value = 2;
//	}
//
// kinesub delivers each user record as its own Message, but for those whose hash key lies
// outside the range of the shard the aggregate is stored in (reader.go). The subset of
// protobuf needed is decoded here rather than through a protobuf dependency. What a protobuf
// decoder refuses is refused here too (an invalid field number, a record or tag without its
// required fields), so kinesub and other deaggregators agree on which aggregates are
// malformed; groups, which the schema has none of and no KPL writes, are refused as well
// rather than skipped.

// Record is one user record of an aggregated record.
type Record struct {
	PartitionKey    string
	Data            []byte // a sub-slice of the aggregated record's data
	ExplicitHashKey string // "" when the user record has none
}

// HashKey is the user record's hash key: its explicit hash key, or else its partition key's
// (the key the service would have placed it by, had it been put on its own).
func (r *Record) HashKey() HashKey {
	if r.ExplicitHashKey != "" {
		h, _ := ParseHashKey(r.ExplicitHashKey) // deaggregate checked it
		return h
	}
	return PartitionHash(r.PartitionKey)
}

var ErrMalformed = errors.New("malformed KPL aggregate")

// deaggregate returns the user records of a KPL-aggregated record, or an error when it is not
// a valid aggregate (bad digest, bad protobuf, an index outside its table, an explicit hash
// key that is not one: the KPL writes neither, and the KCL fails on both).
func Deaggregate(data []byte) ([]Record, error) {
	if !IsAggregated(data) || len(data) < len(Magic)+md5.Size {
		return nil, fmt.Errorf("%w: too short", ErrMalformed)
	}
	body := data[len(Magic) : len(data)-md5.Size]
	sum := md5.Sum(body)
	if !bytes.Equal(sum[:], data[len(data)-md5.Size:]) {
		return nil, fmt.Errorf("%w: digest mismatch", ErrMalformed)
	}
	var keys, ehks []string
	type raw struct {
		key, ehk uint64
		hasEHK   bool
		data     []byte
	}
	var recs []raw
	err := WalkFields(body, func(field int, wire int, v uint64, b []byte) error {
		switch {
		case field == 1 && wire == WireBytes:
			keys = append(keys, string(b))
		case field == 2 && wire == WireBytes:
			ehks = append(ehks, string(b))
		case field == 3 && wire == WireBytes:
			var r raw
			var haveKey, haveData bool
			err := WalkFields(b, func(field int, wire int, v uint64, b []byte) error {
				switch {
				case field == 1 && wire == WireVarint:
					r.key, haveKey = v, true
				case field == 2 && wire == WireVarint:
					r.ehk, r.hasEHK = v, true
				case field == 3 && wire == WireBytes:
					r.data, haveData = b, true
				case field == 4 && wire == WireBytes:
					return checkTag(b)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if !haveKey || !haveData {
				return fmt.Errorf("%w: a record lacks its key index or data", ErrMalformed)
			}
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: no records", ErrMalformed)
	}
	out := make([]Record, len(recs))
	for i, r := range recs {
		if r.key >= uint64(len(keys)) {
			return nil, fmt.Errorf("%w: partition key index %d of %d", ErrMalformed, r.key, len(keys))
		}
		out[i] = Record{PartitionKey: keys[r.key], Data: r.data}
		if r.hasEHK {
			if r.ehk >= uint64(len(ehks)) {
				return nil, fmt.Errorf("%w: explicit hash key index %d of %d", ErrMalformed, r.ehk, len(ehks))
			}
			if _, ok := ParseHashKey(ehks[r.ehk]); !ok {
				return nil, fmt.Errorf("%w: explicit hash key %q", ErrMalformed, ehks[r.ehk])
			}
			out[i].ExplicitHashKey = ehks[r.ehk]
		}
	}
	return out, nil
}

// checkTag checks that a record's tag parses. kinesub does not deliver tags, but an aggregate
// whose tag protobuf decoders refuse is malformed.
func checkTag(tag []byte) error {
	var haveKey bool
	err := WalkFields(tag, func(field, wire int, _ uint64, _ []byte) error {
		haveKey = haveKey || field == 1 && wire == WireBytes
		return nil
	})
	if err == nil && !haveKey {
		err = fmt.Errorf("%w: a tag lacks its key", ErrMalformed)
	}
	return err
}

// maxFieldNumber is the largest field number protobuf allows.
const maxFieldNumber = 1<<29 - 1

// Protobuf wire types used by the KPL format.
const (
	WireVarint = 0
	wire64     = 1
	WireBytes  = 2
	wire32     = 5
)

// WalkFields calls fn for each field of a protobuf message: its number, wire type, and value
// (v for varints, b for length-delimited fields; fixed-size fields are skipped).
func WalkFields(msg []byte, fn func(field, wire int, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		tag, n := binary.Uvarint(msg)
		if n <= 0 {
			return fmt.Errorf("%w: bad field tag", ErrMalformed)
		}
		msg = msg[n:]
		if tag>>3 == 0 || tag>>3 > maxFieldNumber {
			return fmt.Errorf("%w: field number %d", ErrMalformed, tag>>3)
		}
		field, wire := int(tag>>3), int(tag&7)
		var v uint64
		var b []byte
		switch wire {
		case WireVarint:
			v, n = binary.Uvarint(msg)
			if n <= 0 {
				return fmt.Errorf("%w: bad varint", ErrMalformed)
			}
			msg = msg[n:]
		case WireBytes:
			l, n := binary.Uvarint(msg)
			if n <= 0 || l > uint64(len(msg)-n) {
				return fmt.Errorf("%w: bad length", ErrMalformed)
			}
			b = msg[n : n+int(l)]
			msg = msg[n+int(l):]
		case wire64:
			if len(msg) < 8 {
				return fmt.Errorf("%w: short fixed64", ErrMalformed)
			}
			msg = msg[8:]
		case wire32:
			if len(msg) < 4 {
				return fmt.Errorf("%w: short fixed32", ErrMalformed)
			}
			msg = msg[4:]
		default:
			return fmt.Errorf("%w: wire type %d", ErrMalformed, wire)
		}
		if err := fn(field, wire, v, b); err != nil {
			return err
		}
	}
	return nil
}
