package envelope

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"strings"
	"testing"
)

// envelope builds an envelope by hand, so the tests pin the wire format rather than
// Encode's idea of it.
func envelope(block string, payload string) []byte {
	b := []byte("RSK1")
	b = binary.BigEndian.AppendUint32(b, uint32(len(block)))
	return append(append(b, block...), payload...)
}

func TestEncodeEnvelope(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers map[string]string
		payload string
		want    []byte
		err     error
	}{
		{"no headers", nil, "hello", []byte("hello"), nil},
		{"empty map", map[string]string{}, "hello", []byte("hello"), nil},
		{"one header", map[string]string{"k": "v"}, "p", envelope("k: v\n", "p"), nil},
		{"names lowercased and sorted", map[string]string{"b": "2", "a": "1", "C": "3"}, "p", envelope("a: 1\nb: 2\nc: 3\n", "p"), nil},
		{"names differing in case only", map[string]string{"Trace": "1", "trace": "2"}, "p", nil, ErrInvalidHeader},
		{"name with surrounding space", map[string]string{" k": "v"}, "p", nil, ErrInvalidHeader},
		{"value with leading space", map[string]string{"k": " v"}, "p", nil, ErrInvalidHeader},
		{"value with trailing CR", map[string]string{"k": "v\r"}, "p", nil, ErrInvalidHeader},
		{"empty value", map[string]string{"k": ""}, "", envelope("k: \n", ""), nil},
		{"value with colon and space", map[string]string{"url": "http://x: y"}, "p", envelope("url: http://x: y\n", "p"), nil},
		{"value with CR", map[string]string{"k": "a\rb"}, "p", envelope("k: a\rb\n", "p"), nil},
		{"unicode", map[string]string{"Clé": "valeur ✓"}, "p", envelope("clé: valeur ✓\n", "p"), nil},
		{"payload that looks like an envelope", nil, string(envelope("k: v\n", "p")), envelope("", string(envelope("k: v\n", "p"))), nil},
		{"payload with magic only", nil, "RSK1", []byte("RSK1"), nil},
		{"payload that is an envelope without colons", nil, string(envelope("kv\n", "p")), envelope("", string(envelope("kv\n", "p"))), nil},
		{"empty name", map[string]string{"": "v"}, "p", nil, ErrInvalidHeader},
		{"name with colon", map[string]string{"a:b": "v"}, "p", nil, ErrInvalidHeader},
		{"name with newline", map[string]string{"a\nb": "v"}, "p", nil, ErrInvalidHeader},
		{"value with newline", map[string]string{"k": "a\nb"}, "p", nil, ErrInvalidHeader},
		{"one bad among good", map[string]string{"a": "1", "b": "x\n", "c": "3"}, "p", nil, ErrInvalidHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Encode(tc.headers, []byte(tc.payload))
			if !errors.Is(err, tc.err) {
				t.Fatalf("Encode error = %v, want %v", err, tc.err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("Encode = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecodeEnvelope(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    []byte
		headers map[string]string
		payload string
	}{
		{"plain", []byte("hello"), map[string]string{}, "hello"},
		{"empty", nil, map[string]string{}, ""},
		{"one header", envelope("k: v\n", "p"), map[string]string{"k": "v"}, "p"},
		{"several headers", envelope("a: 1\nb: 2\nc: 3\n", "payload"), map[string]string{"a": "1", "b": "2", "c": "3"}, "payload"},
		{"unsorted names accepted", envelope("b: 2\na: 1\n", "p"), map[string]string{"a": "1", "b": "2"}, "p"},
		{"empty value", envelope("k: \n", ""), map[string]string{"k": ""}, ""},
		{"empty block", envelope("", "p"), map[string]string{}, "p"},
		{"payload with newlines", envelope("k: v\n", "a: b\n"), map[string]string{"k": "v"}, "a: b\n"},
		// The crate's decoder rules, one by one.
		{"CR LF line ends", envelope("a: 1\r\nb: 2\r\n", "p"), map[string]string{"a": "1", "b": "2"}, "p"},
		{"CR inside a value kept", envelope("k: a\rb\n", "p"), map[string]string{"k": "a\rb"}, "p"},
		{"spaces around name and value", envelope("  k  :   v  \n", "p"), map[string]string{"k": "v"}, "p"},
		{"tabs around name and value", envelope("\tk\t:\tv\t\r\n", "p"), map[string]string{"k": "v"}, "p"},
		{"colon without space", envelope("k:v\n", "p"), map[string]string{"k": "v"}, "p"},
		{"colon at end of line", envelope("k:\n", "p"), map[string]string{"k": ""}, "p"},
		{"colons inside value", envelope("url: http://x:8080/a:b\n", "p"), map[string]string{"url": "http://x:8080/a:b"}, "p"},
		{"value with colon and space", envelope("url: http://x: y\n", "p"), map[string]string{"url": "http://x: y"}, "p"},
		{"line without colon ignored", envelope("a: 1\nnot a header\nb: 2\n", "p"), map[string]string{"a": "1", "b": "2"}, "p"},
		{"only lines without colon", envelope("kv\nxy\n", "p"), map[string]string{}, "p"},
		{"empty lines ignored", envelope("\n\r\na: 1\n\n", "p"), map[string]string{"a": "1"}, "p"},
		{"unterminated last line", envelope("a: 1\nb: 2", "p"), map[string]string{"a": "1", "b": "2"}, "p"},
		{"mixed-case names lowercased", envelope("Content-Type: text/plain\nX-TRACE-ID: AbC\n", "p"), map[string]string{"content-type": "text/plain", "x-trace-id": "AbC"}, "p"},
		{"non-ASCII name lowercased", envelope("CLÉ: Valeur\n", "p"), map[string]string{"clé": "Valeur"}, "p"},
		{"duplicate names: last wins", envelope("k: 1\nK: 2\nk : 3\n", "p"), map[string]string{"k": "3"}, "p"},
		{"empty name", envelope(": v\n", "p"), map[string]string{"": "v"}, "p"},
		// Only what the crate cannot read either is some other producer's payload, returned whole.
		{"magic only", []byte("RSK1"), map[string]string{}, "RSK1"},
		{"short length", []byte("RSK1\x00\x00"), map[string]string{}, "RSK1\x00\x00"},
		{"length beyond data", envelope("k: v\n", "")[:12], map[string]string{}, string(envelope("k: v\n", "")[:12])},
		{"huge length", []byte("RSK1\xff\xff\xff\xffk: v\n"), map[string]string{}, "RSK1\xff\xff\xff\xffk: v\n"},
		{"other magic", []byte("RSK2\x00\x00\x00\x00p"), map[string]string{}, "RSK2\x00\x00\x00\x00p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers, payload := Decode(tc.data)
			if headers == nil {
				t.Fatal("headers are nil")
			}
			if !maps.Equal(headers, tc.headers) {
				t.Errorf("headers = %q, want %q", headers, tc.headers)
			}
			if string(payload) != tc.payload {
				t.Errorf("payload = %q, want %q", payload, tc.payload)
			}
			if len(payload) > 0 && &payload[len(payload)-1] != &tc.data[len(tc.data)-1] {
				t.Error("payload is a copy, want a sub-slice of data")
			}
		})
	}
}

func TestDecodeEnvelopeFreshMap(t *testing.T) {
	a, _ := Decode([]byte("plain"))
	a["mine"] = "x"
	b, _ := Decode([]byte("plain"))
	if len(b) != 0 {
		t.Fatalf("a write to one message's headers shows in another's: %q", b)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers map[string]string
		payload []byte
	}{
		{"none", nil, []byte("p")},
		{"one", map[string]string{"trace-id": "abc123"}, []byte(`{"n":1}`)},
		{"many", map[string]string{"a": "", "b b": "x: y", "content-type": "application/json", "ünï": "çödé", "v": "in\rside"}, bytes.Repeat([]byte{0, 1, '\n', ':'}, 300)},
		{"empty payload", map[string]string{"k": "v"}, nil},
		{"payload is an envelope", nil, envelope("k: v\n", "inner")},
		{"headers and payload is an envelope", map[string]string{"outer": "1"}, envelope("k: v\n", "inner")},
		{"KPL payload", map[string]string{"k": "v"}, append([]byte{0xF3, 0x89, 0x9A, 0xC2}, "rest"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Encode(tc.headers, tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			headers, payload := Decode(data)
			want := map[string]string{}
			for k, v := range tc.headers {
				want[strings.ToLower(k)] = v
			}
			if !maps.Equal(headers, want) || !bytes.Equal(payload, tc.payload) {
				t.Errorf("decode(encode(%q, %q)) = %q, %q", tc.headers, tc.payload, headers, payload)
			}
		})
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte("plain"), "k", "v", []byte("p"))
	f.Add(envelope("a: 1\nb: 2\n", "payload"), "a:b", "x\ny", []byte{})
	f.Add(envelope("k: v", "p"), "", "", []byte("RSK1\x00\x00\x00\x00"))
	f.Add([]byte("RSK1\xff\xff\xff\xff"), "name with space", "value: with colon", envelope("k: v\n", "p"))
	f.Add([]byte{0xF3, 0x89, 0x9A, 0xC2}, "ü", "\r", []byte(nil))
	f.Fuzz(func(t *testing.T, data []byte, name, value string, payload []byte) {
		// Any data: no panic, headers never nil, payload a sub-slice of data.
		headers, p := Decode(data)
		if headers == nil {
			t.Fatal("headers are nil")
		}
		if len(p) > len(data) || (len(p) > 0 && &p[len(p)-1] != &data[len(data)-1]) {
			t.Fatalf("payload %q is not a suffix sub-slice of data %q", p, data)
		}
		// Bytes are dropped only as an envelope's prefix and block, whose length says how many.
		if dropped := len(data) - len(p); dropped > 0 {
			if !bytes.HasPrefix(data, []byte("RSK1")) || int(binary.BigEndian.Uint32(data[4:8])) != dropped-8 {
				t.Fatalf("%d bytes of %q dropped, not an envelope's block", dropped, data)
			}
		}
		for name := range headers {
			if name != strings.ToLower(name) || name != strings.TrimSpace(name) {
				t.Fatalf("header name %q is not lowercased and trimmed", name)
			}
		}

		// Anything Encode produces decodes back to what went in.
		for _, in := range []map[string]string{nil, {name: value}, {name: value, "fixed": "1"}} {
			enc, err := Encode(in, payload)
			invalid := name == "" || strings.ContainsAny(name, ":\n") || strings.Contains(value, "\n") ||
				strings.TrimSpace(name) != name || strings.TrimSpace(value) != value ||
				strings.ToLower(name) == "fixed" && len(in) == 2
			if in == nil {
				invalid = false
			}
			if invalid != (err != nil) || (err != nil && !errors.Is(err, ErrInvalidHeader)) {
				t.Fatalf("Encode(%q) error = %v, header invalid = %v", in, err, invalid)
			}
			if err != nil {
				continue
			}
			gotHeaders, gotPayload := Decode(enc)
			want := map[string]string{}
			for k, v := range in {
				want[strings.ToLower(k)] = v
			}
			if !maps.Equal(gotHeaders, want) || !bytes.Equal(gotPayload, payload) {
				t.Fatalf("decode(encode(%q, %q)) = %q, %q", in, payload, gotHeaders, gotPayload)
			}
		}
	})
}

func BenchmarkDecodeEnvelope(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 1024)
	withHeaders, err := Encode(map[string]string{
		"content-type": "application/json",
		"trace-id":     "4bf92f3577b34da6a3ce929d0e0e4736",
		"producer":     "orders-service",
	}, payload)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"plain", payload},
		{"3headers", withHeaders},
		{"crate-style", envelope("Content-Type : application/json\r\nno colon\nTrace-ID:4bf92f35\r\n", string(payload))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				h, p := Decode(bc.data)
				if h == nil || len(p) == 0 {
					b.Fatal("decode failed")
				}
			}
		})
	}
}

func BenchmarkEncodeEnvelope(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 1024)
	headers := map[string]string{
		"content-type": "application/json",
		"trace-id":     "4bf92f3577b34da6a3ce929d0e0e4736",
		"producer":     "orders-service",
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(headers, payload); err != nil {
			b.Fatal(err)
		}
	}
}
