package kinesub

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestUtilMeter: the utilization is the busy share of the consumer's capacity over the last
// window (four slots and the current one so far), whatever came before it.
func TestUtilMeter(t *testing.T) {
	const window = 4 * time.Second
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type change struct {
		at            time.Duration
		servers, idle int
	}
	for _, c := range []struct {
		name    string
		changes []change
		now     time.Duration
		want    float64
	}{
		{"no consumer yet: busy", nil, 4 * time.Second, 1},
		{"waiting throughout", []change{{0, 1, 1}}, 4 * time.Second, 0},
		{"waiting a quarter of the time", []change{{0, 1, 1}, {time.Second, 1, 0}}, 4 * time.Second, 0.75},
		{"busy then waiting, in the current slot too", []change{{0, 1, 0}, {2 * time.Second, 1, 1}}, 5*time.Second + 500*time.Millisecond, 1.0 / 4.5},
		{"only the last window counts", []change{{0, 1, 1}, {time.Hour, 1, 0}}, time.Hour + 4*time.Second, 1},
		{"an hour busy, then waiting", []change{{0, 1, 0}, {time.Hour, 1, 1}}, time.Hour + 4*time.Second, 0},
		{"Process: one of four workers busy", []change{{0, 4, 3}}, 4 * time.Second, 0.25},
		{"Process: all four busy half the time", []change{{0, 4, 4}, {2 * time.Second, 4, 0}}, 4 * time.Second, 0.5},
		{"Process ends: a single consumer waits", []change{{0, 4, 0}, {2 * time.Second, 1, 1}}, 4 * time.Second, 8.0 / 10},
		{"a change noted out of order counts at the last one", []change{{0, 1, 1}, {2 * time.Second, 1, 0}, {time.Second, 1, 1}}, 4 * time.Second, 0},
		{"idle above the servers is all of them", []change{{0, 2, 5}}, 4 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newUtilMeter(t0, window)
			for _, ch := range c.changes {
				m.set(ch.servers, ch.idle, at(ch.at))
			}
			assert.InDelta(t, c.want, m.utilization(at(c.now)), 0.001)
		})
	}
	var nilMeter *utilMeter
	nilMeter.set(1, 1, t0)
	nilMeter.waiting(true)
	assert.Zero(t, nilMeter.utilization(t0), "a nil meter measures nothing")
}

// TestPerMille: utilizations are noted in thousandths, clamped to 0‰–1000‰.
func TestPerMille(t *testing.T) {
	for u, want := range map[float64]int64{0: 0, 0.0004: 0, 0.7: 700, 0.9996: 1000, 1: 1000, -1: 0, 2: 1000} {
		assert.Equal(t, want, perMille(u), fmt.Sprint(u))
	}
}
