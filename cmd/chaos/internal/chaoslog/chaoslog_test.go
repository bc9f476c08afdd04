package chaoslog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	w, err := Create(path, "c0.1")
	require.NoError(t, err)
	w.Delivery("shardId-0", "4968", "k00001", []byte("k00001/7\t\"x\"\n"))
	w.Ack("shardId-0", "4968")
	b, _ := os.ReadFile(path)
	assert.Empty(t, b, "deliveries and acks wait for Flush")
	require.NoError(t, w.Event("lease taken", map[string]string{"shard_id": "shardId-0", "why": "a b"}))
	require.NoError(t, w.Close())

	b, err = os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	require.Len(t, lines, 3)
	d, err := Parse(lines[0])
	require.NoError(t, err)
	assert.Equal(t, byte(Delivery), d.Kind)
	assert.Equal(t, "c0.1", d.Owner)
	assert.Equal(t, []string{"shardId-0", "4968", "k00001", "k00001/7\t\"x\"\n"}, []string{d.Shard, d.Seq, d.Key, d.Payload})
	a, err := Parse(lines[1])
	require.NoError(t, err)
	assert.Equal(t, byte(Ack), a.Kind)
	assert.Equal(t, []string{"c0.1", "shardId-0", "4968"}, []string{a.Owner, a.Shard, a.Seq})
	assert.False(t, a.Time.Before(d.Time))
	e, err := Parse(lines[2])
	require.NoError(t, err)
	assert.Equal(t, byte(Event), e.Kind)
	assert.Equal(t, "lease taken", e.Msg)
	assert.Equal(t, map[string]string{"shard_id": "shardId-0", "why": "a b"}, e.Attrs)
	assert.False(t, e.Time.Before(a.Time))
}

func TestParseRejectsCutLines(t *testing.T) {
	for _, s := range []string{"", "D\t1\tc0", "D\t1\tc0\tshard\t12\tk", "A\t1\tc0\tshard", "E\tx\tc0\tm\t{}", "E\t1\tc0\tm\t{\"a\":", "X\t1\tc0"} {
		_, err := Parse(s)
		assert.Error(t, err, "%q", s)
	}
}
