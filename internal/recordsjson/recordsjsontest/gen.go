// Package recordsjsontest has what tests of the records decoder and of the fan-out event
// reader share: random GetRecords answers in the service's JSON, and an HTTP client of functions.
package recordsjsontest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Doer is an HTTP client that answers every request with its function.
type Doer func(*http.Request) (*http.Response, error)

func (f Doer) Do(r *http.Request) (*http.Response, error) { return f(r) }

// UnwrapAll returns the innermost error of err's Unwrap chain.
func UnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// GenAnswer returns a random GetRecords answer as the service writes it: records with every
// field, optional and unknown members, escapes and white space.

func GenAnswer(rng *rand.Rand) string {
	var b strings.Builder
	ws := func() {
		if rng.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r\n  "}[rng.IntN(4)])
		}
	}
	members := []func(){}
	if rng.IntN(10) > 0 {
		members = append(members, func() {
			b.WriteString(`"Records"`)
			ws()
			b.WriteString(":")
			ws()
			if rng.IntN(20) == 0 {
				b.WriteString("null")
				return
			}
			b.WriteString("[")
			n := rng.IntN(6)
			if rng.IntN(10) == 0 {
				n = 300 + rng.IntN(300) // more than one block of strings and payloads
			}
			for i := range n {
				if i > 0 {
					b.WriteString(",")
				}
				ws()
				genRecord(rng, &b, ws)
			}
			ws()
			b.WriteString("]")
		})
	}
	if rng.IntN(5) > 0 {
		members = append(members, func() { b.WriteString(`"NextShardIterator":` + genValue(rng, genText(rng))) })
	}
	if rng.IntN(5) > 0 {
		members = append(members, func() {
			b.WriteString(`"MillisBehindLatest":`)
			if rng.IntN(10) == 0 {
				b.WriteString("null")
			} else {
				b.WriteString(strconv.FormatInt(rng.Int64N(1<<40), 10))
			}
		})
	}
	if rng.IntN(4) == 0 {
		members = append(members, func() {
			b.WriteString(`"ChildShards":[`)
			for i := range rng.IntN(3) {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"ShardId":%q,"ParentShards":[%q,%q],"HashKeyRange":{"StartingHashKey":"0","EndingHashKey":"340282366920938463463374607431768211455"%s}%s}`,
					"shardId-00000000000"+strconv.Itoa(i), "shardId-000000000000", "shardId-000000000001", genUnknown(rng), genUnknown(rng))
			}
			b.WriteString("]")
		})
	}
	if rng.IntN(4) == 0 {
		members = append(members, func() { b.WriteString(`"SomethingNew":{"a":[1,2.5e3,true,false,null,"x\"y"],"b":{}}`) })
	}
	rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	ws()
	b.WriteString("{")
	for i, m := range members {
		if i > 0 {
			b.WriteString(",")
		}
		ws()
		m()
		ws()
	}
	b.WriteString("}")
	ws()
	return b.String()
}

func genRecord(rng *rand.Rand, b *strings.Builder, ws func()) {
	var fields []string
	if rng.IntN(20) > 0 {
		fields = append(fields, `"SequenceNumber":`+genValue(rng, `"4960`+strconv.FormatUint(rng.Uint64(), 10)+strconv.FormatUint(rng.Uint64(), 10)+`"`))
	}
	if rng.IntN(20) > 0 {
		fields = append(fields, `"PartitionKey":`+genValue(rng, genText(rng)))
	}
	if rng.IntN(20) > 0 {
		fields = append(fields, `"ApproximateArrivalTimestamp":`+genValue(rng, genTime(rng)))
	}
	if rng.IntN(20) > 0 {
		size := rng.IntN(200)
		if rng.IntN(10) == 0 {
			size = rng.IntN(5000) // past the shared blocks' piece size
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		fields = append(fields, `"Data":`+genValue(rng, `"`+base64.StdEncoding.EncodeToString(data)+`"`))
	}
	if rng.IntN(3) == 0 {
		fields = append(fields, `"EncryptionType":`+genValue(rng, []string{`"NONE"`, `"KMS"`}[rng.IntN(2)]))
	}
	if rng.IntN(5) == 0 {
		fields = append(fields, `"Unknown":`+[]string{`{"x":[{}]}`, `[]`, `12`, `-1.5E-3`, `"s\\\""`, `true`}[rng.IntN(6)])
	}
	rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	b.WriteString("{")
	for i, f := range fields {
		if i > 0 {
			b.WriteString(",")
		}
		ws()
		b.WriteString(f)
	}
	ws()
	b.WriteString("}")
}

// genValue is v, or now and then null.
func genValue(rng *rand.Rand, v string) string {
	if rng.IntN(15) == 0 {
		return "null"
	}
	return v
}

func genUnknown(rng *rand.Rand) string {
	if rng.IntN(3) == 0 {
		return `,"New":[null,{"k":"v"}]`
	}
	return ""
}

// genText is a JSON string: plain, with escapes, non-ASCII, invalid UTF-8 or empty.
func genText(rng *rand.Rand) string {
	parts := []string{"key-", "é", `\"`, `\\`, `\/`, `\u00e9`, `\ud83d\ude00`, `\ud800`, "\xff", "😀", `\n`, `\t`, "x", "12345"}
	var b bytes.Buffer
	b.WriteByte('"')
	for range rng.IntN(8) {
		if rng.IntN(2) == 0 {
			b.WriteString("k")
			continue
		}
		b.WriteString(parts[rng.IntN(len(parts))])
	}
	b.WriteByte('"')
	return b.String()
}

// genTime is an arrival timestamp in epoch seconds, in one of the forms JSON allows.
func genTime(rng *rand.Rand) string {
	ms := 1_500_000_000_000 + rng.Int64N(400_000_000_000)
	sec := float64(ms) / 1000
	switch rng.IntN(5) {
	case 0:
		return strconv.FormatInt(ms/1000, 10)
	case 1:
		return strconv.FormatFloat(sec, 'E', -1, 64)
	case 2:
		return strconv.FormatFloat(sec, 'e', 12, 64)
	case 3:
		return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
	}
	_ = time.Second
	return strconv.FormatFloat(sec+rng.Float64()/1000, 'f', -1, 64)
}
