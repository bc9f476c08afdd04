package recordsjson

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// The JSON scanner and value readers under Decode, and the arena its strings and
// payloads are copied into. The scanner reads exactly JSON's grammar, so that what it accepts
// the SDK's decoder accepts too; whatever it does not read (errNotRecords) is left to the SDK.

func (d *recordsDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte, or 0 at the end.
func (d *recordsDecoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *recordsDecoder) expect(c byte) error {
	if d.peek() != c {
		return errNotRecords
	}
	d.i++
	return nil
}

// null consumes a null and reports whether there was one.
func (d *recordsDecoder) null() bool {
	if d.peek() == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")) {
		d.i += 4
		return true
	}
	return false
}

// object reads an object, calling member with each key (valid until the next read) to read
// its value.
func (d *recordsDecoder) object(member func(key []byte) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.i++
		return nil
	}
	for {
		key, escaped, err := d.rawString()
		if err != nil || escaped {
			return errNotRecords // no member name this decoder reads is escaped
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return errNotRecords
		}
	}
}

// array reads an array, calling elem to read each element.
func (d *recordsDecoder) array(elem func() error) error {
	if err := d.expect('['); err != nil {
		return err
	}
	if d.peek() == ']' {
		d.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return nil
		default:
			return errNotRecords
		}
	}
}

// rawString reads a string and returns its bytes between the quotes, and whether they hold
// an escape.
func (d *recordsDecoder) rawString() (raw []byte, escaped bool, err error) {
	if err := d.expect('"'); err != nil {
		return nil, false, err
	}
	start := d.i
	q := bytes.IndexByte(d.b[start:], '"')
	if q < 0 {
		return nil, false, errNotRecords
	}
	raw = d.b[start : start+q]
	if bytes.IndexByte(raw, '\\') >= 0 {
		return d.escapedString(start)
	}
	if hasControl(raw) {
		return nil, false, errNotRecords // not JSON: the SDK's decoder says what it makes of it
	}
	d.i = start + q + 1
	return raw, false, nil
}

// escapedString reads the rest of a string with an escape, from start, after its quote,
// checking each escape as JSON's grammar has it.
func (d *recordsDecoder) escapedString(start int) ([]byte, bool, error) {
	for d.i = start; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true, nil
		case c == '\\':
			d.i++
			if d.i >= len(d.b) {
				return nil, false, errNotRecords
			}
			switch d.b[d.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if d.i+4 >= len(d.b) {
					return nil, false, errNotRecords
				}
				for _, h := range d.b[d.i+1 : d.i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return nil, false, errNotRecords
					}
				}
				d.i += 4
			default:
				return nil, false, errNotRecords
			}
		case c < 0x20:
			return nil, false, errNotRecords
		}
	}
	return nil, false, errNotRecords
}

// hasControl reports whether b holds a byte below 0x20, eight bytes at a time.
func hasControl(b []byte) bool {
	const highs, below = 0x8080808080808080, 0x20 * 0x0101010101010101
	for ; len(b) >= 8; b = b[8:] {
		x := binary.LittleEndian.Uint64(b)
		if (x-below)&^x&highs != 0 {
			return true
		}
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// text reads a string or null, and reports whether it was a string.
func (d *recordsDecoder) text() (string, bool, error) {
	if d.null() {
		return "", false, nil
	}
	start := d.i
	raw, escaped, err := d.rawString()
	if err != nil {
		return "", false, err
	}
	if escaped {
		// As the SDK's decoder does: text with an escape decodes as encoding/json does it
		// (invalid UTF-8 becomes U+FFFD); text without one is taken byte for byte.
		s, err := unquote(d.b[start:d.i])
		return s, true, err
	}
	return d.str.string(raw), true, nil
}

// unquote decodes a JSON string with escapes, quotes included. Apart from text, so that only
// this rare path gives its result to encoding/json (and to the heap).
func unquote(quoted []byte) (string, error) {
	var s string
	err := json.Unmarshal(quoted, &s)
	return s, err
}

func (d *recordsDecoder) optString(p **string) error {
	s, ok, err := d.text()
	if ok {
		*p = &s
	}
	return err
}

// number returns the bytes of a number, checked against JSON's grammar:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *recordsDecoder) number() ([]byte, error) {
	d.ws()
	start := d.i
	if d.at('-') {
		d.i++
	}
	switch {
	case d.at('0'):
		d.i++
	case d.digits() == 0:
		return nil, errNotRecords
	}
	if d.at('.') {
		d.i++
		if d.digits() == 0 {
			return nil, errNotRecords
		}
	}
	if d.at('e') || d.at('E') {
		d.i++
		if d.at('+') || d.at('-') {
			d.i++
		}
		if d.digits() == 0 {
			return nil, errNotRecords
		}
	}
	return d.b[start:d.i], nil
}

func (d *recordsDecoder) at(c byte) bool { return d.i < len(d.b) && d.b[d.i] == c }

// digits skips decimal digits and returns how many.
func (d *recordsDecoder) digits() int {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i - start
}

func (d *recordsDecoder) optInt64(p **int64) error {
	if d.null() {
		return nil
	}
	num, err := d.number()
	if err != nil {
		return err
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return errNotRecords
	}
	*p = aws.Int64(v)
	return nil
}

// timestamp reads epoch seconds (or null) into t, as smithy-go's ParseEpochSeconds does: the
// float64 times 1,000, truncated to whole milliseconds.
func (d *recordsDecoder) timestamp(t *time.Time) (bool, error) {
	if d.null() {
		return false, nil
	}
	num, err := d.number()
	if err != nil {
		return false, err
	}
	v, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(v, 0) || math.Abs(v) > 1<<52/1000 {
		return false, errNotRecords
	}
	// math/big at a float64's precision, as the SDK multiplies, rounds as float64 does.
	ms := math.Trunc(v * 1000)
	*t = time.Unix(0, int64(ms)*1e6).UTC()
	return true, nil
}

// data reads a base64 payload (or null) into p.
func (d *recordsDecoder) data(p *[]byte) error {
	if d.null() {
		return nil
	}
	raw, escaped, err := d.rawString()
	if err != nil {
		return err
	}
	if escaped {
		return errNotRecords // base64 has no escapes; the SDK says what it makes of one
	}
	if len(raw) == 0 {
		*p = []byte{} // as the SDK's decoder: empty, not nil
		return nil
	}
	dst := d.dat.bytes(base64.StdEncoding.DecodedLen(len(raw)))
	n, err := base64.StdEncoding.Decode(dst, raw)
	if err != nil {
		return errNotRecords
	}
	*p = dst[:n:n]
	return nil
}

// skip reads and drops any value.
func (d *recordsDecoder) skip() error {
	switch d.peek() {
	case '{':
		return d.object(func([]byte) error { return d.skip() })
	case '[':
		return d.array(d.skip)
	case '"':
		_, _, err := d.rawString()
		return err
	case 't':
		return d.word("true")
	case 'f':
		return d.word("false")
	case 'n':
		return d.word("null")
	}
	_, err := d.number()
	return err
}

func (d *recordsDecoder) word(w string) error {
	if !bytes.HasPrefix(d.b[d.i:], []byte(w)) {
		return errNotRecords
	}
	d.i += len(w)
	return nil
}

// arena hands out pieces of shared blocks, so that a page's many small strings and payloads
// cost a few allocations instead of one each. A block is never written again once a piece of
// it is handed out, so strings made from it stay immutable.
type arena struct {
	block []byte
	size  int // bytes in a new block; 0: arenaBlock
}

const (
	arenaBlock = 8 << 10 // bytes in a block: what a record kept alive can keep alive with it
	arenaPiece = 1 << 10 // pieces larger than this get their own allocation
)

// bytes returns n bytes of a block, with no room to append into the next piece.
func (a *arena) bytes(n int) []byte {
	if n > arenaPiece {
		return make([]byte, n)
	}
	if n > cap(a.block)-len(a.block) {
		size := a.size
		if size == 0 {
			size = arenaBlock
		}
		a.block = make([]byte, 0, max(size, n))
	}
	start := len(a.block)
	a.block = a.block[:start+n]
	return a.block[start : start+n : start+n]
}

// string returns a string with b's bytes.
func (a *arena) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	p := a.bytes(len(b))
	copy(p, b)
	return unsafe.String(&p[0], len(p))
}
