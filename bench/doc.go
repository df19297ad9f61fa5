// Package bench compares seqsched with its floor, naive designs and peer
// libraries, on workloads of its own and on a subset of the Savina actor
// benchmarks (savina*.go). It is its own module so that peers never become
// dependencies of the library.
package bench
