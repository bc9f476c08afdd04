package envelope

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The header envelope is shared with the Rust implementation (the ruststream-kinesis crate), so
// both sides must agree on every byte. A record with headers is
//
//	"RSK1" | block length (big-endian uint32) | block | payload
//
// The crate writes one "name: value\n" line per header; it reads a block more loosely, and
// kinesub reads it exactly as the crate does: the block is split into lines at '\n' (a '\r'
// ending a line is dropped), each line at its first ':', name and value are trimmed of white
// space, a line without ':' is ignored, and names are lowercased (the crate's Headers type is
// case-insensitive and lowercases them). Of duplicate names the last line wins. Only a block
// that even the crate cannot read (a length past the end of the record) makes the record a
// plain payload. kinesub writes the crate's form, names lowercased and sorted, and refuses a
// header that would not read back as given. A record without headers is the bare payload.
// ErrInvalidHeader is kinesub.ErrInvalidHeader: a header the envelope cannot carry.
var ErrInvalidHeader = errors.New("kinesub: invalid header")

const (
	Magic  = "RSK1"
	prefix = len(Magic) + 4 // magic and block length
)

// Encode returns the record data that carries headers and payload. With no headers it
// returns payload itself (not a copy), unless payload would be misread as an envelope: then it
// is wrapped in an envelope with an empty block, which decodes back to no headers and payload.
func Encode(headers map[string]string, payload []byte) ([]byte, error) {
	if len(headers) == 0 {
		if _, ok := parse(payload); !ok {
			return payload, nil
		}
	}
	block := 0
	names := make([]string, 0, len(headers))
	lower := make(map[string]string, len(headers)) // lowercased name to the name given
	for name, value := range headers {
		if err := CheckHeader(name, value); err != nil {
			return nil, err
		}
		low := strings.ToLower(name)
		if other, dup := lower[low]; dup {
			return nil, fmt.Errorf("%w: names %q and %q are the same header (names are case-insensitive)", ErrInvalidHeader, other, name)
		}
		lower[low] = name
		block += len(low) + len(": ") + len(value) + len("\n")
		names = append(names, low)
	}
	slices.Sort(names)
	if block > math.MaxUint32 {
		return nil, fmt.Errorf("%w: header block of %d bytes exceeds the envelope's 4 GiB limit", ErrInvalidHeader, block)
	}
	out := make([]byte, 0, prefix+block+len(payload))
	out = append(out, Magic...)
	out = binary.BigEndian.AppendUint32(out, uint32(block))
	for _, name := range names {
		out = append(out, name...)
		out = append(out, ": "...)
		out = append(out, headers[lower[name]]...)
		out = append(out, '\n')
	}
	return append(out, payload...), nil
}

// CheckHeader refuses a header that a reader of the envelope would not read back as given
// (apart from the name's case): the reader splits at newlines and at a name's first ':', and
// trims white space around names and values.
func CheckHeader(name, value string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidHeader)
	case strings.ContainsAny(name, ":\n"):
		return fmt.Errorf("%w: name %q contains ':' or a newline", ErrInvalidHeader, name)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: name %q begins or ends with white space", ErrInvalidHeader, name)
	case strings.Contains(value, "\n"):
		return fmt.Errorf("%w: value of %q contains a newline", ErrInvalidHeader, name)
	case strings.TrimSpace(value) != value:
		return fmt.Errorf("%w: value of %q begins or ends with white space", ErrInvalidHeader, name)
	}
	return nil
}

// Decode splits record data into headers and payload. payload is a sub-slice of data,
// never a copy. Data that is not an envelope (no magic, or a block length past the end of the
// data) is a plain payload with no headers, so a producer that never heard of envelopes is read
// unchanged.
//
// headers is never nil, and it belongs to the caller: a fresh map on every call, also when it is
// empty. A shared empty map would save that one small allocation but would let one consumer's
// write show up in every other message (and race); a nil map would panic on the first write.
func Decode(data []byte) (headers map[string]string, payload []byte) {
	headers, payload = Split(data)
	if headers == nil {
		headers = map[string]string{}
	}
	return headers, payload
}

// Split is Decode with nil headers when the data carries none. The subscriber
// reads with it: Message.Headers makes the empty map only when asked, so a record without
// headers (most of them) costs no allocation here.
func Split(data []byte) (headers map[string]string, payload []byte) {
	block, ok := parse(data)
	if !ok {
		return nil, data
	}
	payload = data[prefix+len(block):]
	if bytes.IndexByte(block, ':') < 0 {
		return nil, payload // no line carries a header
	}
	// One string for the whole block: names and values are substrings of it (unless a name
	// needs lowercasing), which costs one allocation instead of two per header.
	s := string(block)
	headers = make(map[string]string, strings.Count(s, "\n")+1)
	for len(s) > 0 {
		line := s
		if j := strings.IndexByte(s, '\n'); j >= 0 {
			line, s = s[:j], s[j+1:]
		} else {
			s = ""
		}
		line = strings.TrimSuffix(line, "\r")
		name, value, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		headers[lowerName(strings.TrimSpace(name))] = strings.TrimSpace(value)
	}
	return headers, payload
}

// lowerName is strings.ToLower without its allocation for a name already in lower case, which is
// how kinesub and the crate write names.
func lowerName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			return strings.ToLower(name)
		}
	}
	return name
}

// parse reports whether data is an envelope and returns its header block.
func parse(data []byte) (block []byte, ok bool) {
	if !Has(data) {
		return nil, false
	}
	n := binary.BigEndian.Uint32(data[len(Magic):prefix])
	if uint64(n) > uint64(len(data)-prefix) {
		return nil, false
	}
	return data[prefix : prefix+int(n)], true
}

// Has reports whether data begins as an envelope does: the cheap test that most records,
// which carry no headers, fail.
func Has(data []byte) bool {
	return len(data) >= prefix && string(data[:len(Magic)]) == Magic
}
