// Package bench compares seqsched with its floor, naive designs and peer
// libraries. It is its own module so that peers never become dependencies
// of the library.
package bench
