package kinesub

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The header envelope is shared with the Rust implementation, so both sides must agree on every
// byte. A record with headers is
//
//	"RSK1" | block length (big-endian uint32) | block | payload
//
// where the block holds one "name: value\n" line per header, names sorted. A record without
// headers is the bare payload.
const (
	envelopeMagic  = "RSK1"
	envelopePrefix = len(envelopeMagic) + 4 // magic and block length
)

// encodeEnvelope returns the record data that carries headers and payload. With no headers it
// returns payload itself (not a copy), unless payload would be misread as an envelope: then it
// is wrapped in an envelope with an empty block, which decodes back to no headers and payload.
func encodeEnvelope(headers map[string]string, payload []byte) ([]byte, error) {
	if len(headers) == 0 {
		if _, ok := parseEnvelope(payload); !ok {
			return payload, nil
		}
	}
	block := 0
	names := make([]string, 0, len(headers))
	for name, value := range headers {
		if err := checkHeader(name, value); err != nil {
			return nil, err
		}
		block += len(name) + len(": ") + len(value) + len("\n")
		names = append(names, name)
	}
	slices.Sort(names)
	if block > math.MaxUint32 {
		return nil, fmt.Errorf("%w: header block of %d bytes exceeds the envelope's 4 GiB limit", ErrInvalidHeader, block)
	}
	out := make([]byte, 0, envelopePrefix+block+len(payload))
	out = append(out, envelopeMagic...)
	out = binary.BigEndian.AppendUint32(out, uint32(block))
	for _, name := range names {
		out = append(out, name...)
		out = append(out, ": "...)
		out = append(out, headers[name]...)
		out = append(out, '\n')
	}
	return append(out, payload...), nil
}

func checkHeader(name, value string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidHeader)
	case strings.ContainsAny(name, ":\n"):
		return fmt.Errorf("%w: name %q contains ':' or a newline", ErrInvalidHeader, name)
	case strings.Contains(value, "\n"):
		return fmt.Errorf("%w: value of %q contains a newline", ErrInvalidHeader, name)
	}
	return nil
}

// decodeEnvelope splits record data into headers and payload. payload is a sub-slice of data,
// never a copy. Data that is not a well-formed envelope (no magic, a length beyond the data, a
// line that is not "name: value") is a plain payload with no headers, so a producer that never
// heard of envelopes is read unchanged.
//
// headers is never nil, and it belongs to the caller: a fresh map on every call, also when it is
// empty. A shared empty map would save that one small allocation but would let one consumer's
// write show up in every other message (and race); a nil map would panic on the first write.
func decodeEnvelope(data []byte) (headers map[string]string, payload []byte) {
	headers, payload = splitEnvelope(data)
	if headers == nil {
		headers = map[string]string{}
	}
	return headers, payload
}

// splitEnvelope is decodeEnvelope with nil headers when the data carries none. The subscriber
// reads with it: Message.Headers makes the empty map only when asked, so a record without
// headers (most of them) costs no allocation here.
func splitEnvelope(data []byte) (headers map[string]string, payload []byte) {
	block, ok := parseEnvelope(data)
	if !ok || len(block) == 0 {
		if ok {
			data = data[envelopePrefix:]
		}
		return nil, data
	}
	// One string for the whole block: every name and value is a substring of it, which costs one
	// allocation instead of two per header.
	s := string(block)
	headers = make(map[string]string, strings.Count(s, "\n"))
	for len(s) > 0 {
		i := strings.IndexByte(s, ':')
		j := strings.IndexByte(s, '\n')
		headers[s[:i]] = s[i+2 : j]
		s = s[j+1:]
	}
	return headers, data[envelopePrefix+len(block):]
}

// parseEnvelope reports whether data is a well-formed envelope and returns its header block.
// It checks everything decodeEnvelope relies on, without allocating.
func parseEnvelope(data []byte) (block []byte, ok bool) {
	if len(data) < envelopePrefix || string(data[:len(envelopeMagic)]) != envelopeMagic {
		return nil, false
	}
	n := binary.BigEndian.Uint32(data[len(envelopeMagic):envelopePrefix])
	if uint64(n) > uint64(len(data)-envelopePrefix) {
		return nil, false
	}
	block = data[envelopePrefix : envelopePrefix+int(n)]
	for rest := block; len(rest) > 0; {
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return nil, false // last line unterminated
		}
		i := bytes.IndexByte(rest[:j], ':')
		if i <= 0 || rest[i+1] != ' ' { // i < j, so rest[i+1] exists
			return nil, false // empty name, no ':', or ':' not followed by ' '
		}
		rest = rest[j+1:]
	}
	return block, true
}
