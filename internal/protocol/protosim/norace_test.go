//go:build !race

package protosim

const raceDetector = false
