//go:build race

package protosim

// raceDetector: the race detector slows these single-threaded searches several times over and
// finds nothing in them (they start no goroutine), so the bounded searches go one level less
// deep under it.
const raceDetector = true
