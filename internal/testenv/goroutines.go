package testenv

import (
	"runtime"
	"strings"
)

// EventStreamReaders counts the SDK's event-stream reader goroutines (one per SubscribeToShard
// call still reading), for tests that check an ended subscription leaves none behind.
func EventStreamReaders() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "(*EventStreamReader).readEventStream(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
