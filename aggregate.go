package kinesub

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
)

// aggregatedMagic starts every record that the Kinesis Producer Library aggregated.
var aggregatedMagic = []byte{0xF3, 0x89, 0x9A, 0xC2}

// isAggregated reports whether data is a KPL-aggregated record.
func isAggregated(data []byte) bool { return bytes.HasPrefix(data, aggregatedMagic) }

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

// subRecord is one user record of an aggregated record.
type subRecord struct {
	partitionKey    string
	data            []byte // a sub-slice of the aggregated record's data
	explicitHashKey string // "" when the user record has none
}

// hashKey is the user record's hash key: its explicit hash key, or else its partition key's
// (the key the service would have placed it by, had it been put on its own).
func (r *subRecord) hashKey() hashKey {
	if r.explicitHashKey != "" {
		h, _ := parseHashKey(r.explicitHashKey) // deaggregate checked it
		return h
	}
	return partitionHash(r.partitionKey)
}

var errMalformedAggregate = errors.New("malformed KPL aggregate")

// deaggregate returns the user records of a KPL-aggregated record, or an error when it is not
// a valid aggregate (bad digest, bad protobuf, an index outside its table, an explicit hash
// key that is not one: the KPL writes neither, and the KCL fails on both).
func deaggregate(data []byte) ([]subRecord, error) {
	if !isAggregated(data) || len(data) < len(aggregatedMagic)+md5.Size {
		return nil, fmt.Errorf("%w: too short", errMalformedAggregate)
	}
	body := data[len(aggregatedMagic) : len(data)-md5.Size]
	sum := md5.Sum(body)
	if !bytes.Equal(sum[:], data[len(data)-md5.Size:]) {
		return nil, fmt.Errorf("%w: digest mismatch", errMalformedAggregate)
	}
	var keys, ehks []string
	type raw struct {
		key, ehk uint64
		hasEHK   bool
		data     []byte
	}
	var recs []raw
	err := walkFields(body, func(field int, wire int, v uint64, b []byte) error {
		switch {
		case field == 1 && wire == wireBytes:
			keys = append(keys, string(b))
		case field == 2 && wire == wireBytes:
			ehks = append(ehks, string(b))
		case field == 3 && wire == wireBytes:
			var r raw
			var haveKey, haveData bool
			err := walkFields(b, func(field int, wire int, v uint64, b []byte) error {
				switch {
				case field == 1 && wire == wireVarint:
					r.key, haveKey = v, true
				case field == 2 && wire == wireVarint:
					r.ehk, r.hasEHK = v, true
				case field == 3 && wire == wireBytes:
					r.data, haveData = b, true
				case field == 4 && wire == wireBytes:
					return checkTag(b)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if !haveKey || !haveData {
				return fmt.Errorf("%w: a record lacks its key index or data", errMalformedAggregate)
			}
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: no records", errMalformedAggregate)
	}
	out := make([]subRecord, len(recs))
	for i, r := range recs {
		if r.key >= uint64(len(keys)) {
			return nil, fmt.Errorf("%w: partition key index %d of %d", errMalformedAggregate, r.key, len(keys))
		}
		out[i] = subRecord{partitionKey: keys[r.key], data: r.data}
		if r.hasEHK {
			if r.ehk >= uint64(len(ehks)) {
				return nil, fmt.Errorf("%w: explicit hash key index %d of %d", errMalformedAggregate, r.ehk, len(ehks))
			}
			if _, ok := parseHashKey(ehks[r.ehk]); !ok {
				return nil, fmt.Errorf("%w: explicit hash key %q", errMalformedAggregate, ehks[r.ehk])
			}
			out[i].explicitHashKey = ehks[r.ehk]
		}
	}
	return out, nil
}

// checkTag checks that a record's tag parses. kinesub does not deliver tags, but an aggregate
// whose tag protobuf decoders refuse is malformed.
func checkTag(tag []byte) error {
	var haveKey bool
	err := walkFields(tag, func(field, wire int, _ uint64, _ []byte) error {
		haveKey = haveKey || field == 1 && wire == wireBytes
		return nil
	})
	if err == nil && !haveKey {
		err = fmt.Errorf("%w: a tag lacks its key", errMalformedAggregate)
	}
	return err
}

// maxFieldNumber is the largest field number protobuf allows.
const maxFieldNumber = 1<<29 - 1

// Protobuf wire types used by the KPL format.
const (
	wireVarint = 0
	wire64     = 1
	wireBytes  = 2
	wire32     = 5
)

// walkFields calls fn for each field of a protobuf message: its number, wire type, and value
// (v for varints, b for length-delimited fields; fixed-size fields are skipped).
func walkFields(msg []byte, fn func(field, wire int, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		tag, n := binary.Uvarint(msg)
		if n <= 0 {
			return fmt.Errorf("%w: bad field tag", errMalformedAggregate)
		}
		msg = msg[n:]
		if tag>>3 == 0 || tag>>3 > maxFieldNumber {
			return fmt.Errorf("%w: field number %d", errMalformedAggregate, tag>>3)
		}
		field, wire := int(tag>>3), int(tag&7)
		var v uint64
		var b []byte
		switch wire {
		case wireVarint:
			v, n = binary.Uvarint(msg)
			if n <= 0 {
				return fmt.Errorf("%w: bad varint", errMalformedAggregate)
			}
			msg = msg[n:]
		case wireBytes:
			l, n := binary.Uvarint(msg)
			if n <= 0 || l > uint64(len(msg)-n) {
				return fmt.Errorf("%w: bad length", errMalformedAggregate)
			}
			b = msg[n : n+int(l)]
			msg = msg[n+int(l):]
		case wire64:
			if len(msg) < 8 {
				return fmt.Errorf("%w: short fixed64", errMalformedAggregate)
			}
			msg = msg[8:]
		case wire32:
			if len(msg) < 4 {
				return fmt.Errorf("%w: short fixed32", errMalformedAggregate)
			}
			msg = msg[4:]
		default:
			return fmt.Errorf("%w: wire type %d", errMalformedAggregate, wire)
		}
		if err := fn(field, wire, v, b); err != nil {
			return err
		}
	}
	return nil
}
