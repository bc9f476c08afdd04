package protosim

import (
	"time"

	"github.com/gostream/kinesub/internal/protocol"
)

// epoch is the true time 0 on the wall: hosts' wall clocks are offset from it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// host is one machine's clocks. True time (the simulator's, the checker's) is a Duration
// from the run's start; the host's monotonic clock reads origin + t·(1 + ppm/10⁶) at true
// time t, and its wall clock epoch + offset + the same. The protocol assumes rates agree to
// within TTL/12 over a TTL (8.3 %): hosts here differ by up to ±4 % from true time (8 %
// between two).
type host struct {
	origin time.Duration
	offset time.Duration
	ppm    int64
}

func (h host) mono(t time.Duration) time.Duration {
	return h.origin + t + time.Duration(int64(t)*h.ppm/1e6)
}

// at is the earliest true time at which the monotonic clock reads m or more.
func (h host) at(m time.Duration) time.Duration {
	d := int64(m - h.origin)
	if d <= 0 {
		return 0
	}
	t := d * 1e6 / (1e6 + h.ppm)
	for h.mono(time.Duration(t)) < m {
		t++
	}
	for t > 0 && h.mono(time.Duration(t-1)) >= m {
		t--
	}
	return time.Duration(t)
}

func (h host) instant(t time.Duration) protocol.Instant {
	m := h.mono(t)
	return protocol.Instant{Mono: m, Wall: epoch.Add(h.offset + m - h.origin)}
}
