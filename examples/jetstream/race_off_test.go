//go:build !race

package main

// raceEnabled reports a -race build, which runs the program several times
// slower: the default run is left to the build without it.
const raceEnabled = false
