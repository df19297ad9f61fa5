// Package examples holds runnable programs built on seqsched. It is its own
// module so that their dependencies never reach the library.
package examples
