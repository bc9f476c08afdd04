//go:build race

package main

// raceEnabled makes TestChaos build its consumers with the race detector too.
const raceEnabled = true
