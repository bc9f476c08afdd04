package kinesub

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gostream/kinesub/lease"
)

// TestCrateEnvelopes: envelopes in the forms the Rust crate reads (CR LF, loose spacing, lines
// without a colon, mixed-case and duplicate names) arrive with the headers the crate reads from
// them; one whose length runs past the record's end arrives as it is.
func TestCrateEnvelopes(t *testing.T) {
	s := newStream(t, 1)
	sub := subscribeT(t, s, testOpts(lease.NewMemory(), WithStartAt(Horizon()))...)
	s.put("k", rawEnvelope("Content-Type : application/json\r\ncomment line\nX-Trace-ID:ab:cd\r\nx-trace-id: EF\n", `{"n":1}`))
	s.put("k", rawEnvelope("no headers here\n", "second"))
	past := []byte("RSK1\x00\x00\x01\x00k: v\n")
	s.put("k", past)
	got := recv(t, sub, 3, true)
	require.Equal(t, map[string]string{"content-type": "application/json", "x-trace-id": "EF"}, got[0].Headers())
	require.Equal(t, `{"n":1}`, string(got[0].Data()))
	require.Empty(t, got[1].Headers())
	require.Equal(t, "second", string(got[1].Data()))
	require.Empty(t, got[2].Headers())
	require.Equal(t, past, got[2].Data())

	// What kinesub publishes reads back the same way, names lowercased.
	_, err := s.pub.Publish(t.Context(), "k", []byte("third"), map[string]string{"Trace-ID": "x: y"})
	require.NoError(t, err)
	m := recv(t, sub, 1, true)[0]
	require.Equal(t, map[string]string{"trace-id": "x: y"}, m.Headers())
	require.Equal(t, "third", string(m.Data()))
}

// rawEnvelope returns the bytes of an envelope with block as it is, as another writer (the
// crate) may have written it.
func rawEnvelope(block string, payload string) []byte {
	b := binary.BigEndian.AppendUint32([]byte("RSK1"), uint32(len(block)))
	return append(append(b, block...), payload...)
}
