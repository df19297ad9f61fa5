// Package logkey formats a message key for a log record. Keys come from
// publishers, so the broker modules never log one as it is: a key with a
// newline could forge a line in a logger that does not quote its values
// (watermill's StdLogger quotes only values with spaces), and a key of
// megabytes would make every record of it that large. It is internal: the
// modules' docs say what their records hold.
package logkey

import (
	"strconv"
	"unicode/utf8"
)

// Max is the number of bytes of a key that a log record keeps.
const Max = 64

// Cut returns key cut to at most Max bytes, on a rune boundary, with the
// number of bytes left out: "abc…(+1234 bytes)". A key of Max bytes or
// fewer is returned as it is. Use it for slog attributes: slog's handlers
// quote and escape values themselves.
func Cut(key string) string {
	if len(key) <= Max {
		return key
	}
	n := Max
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	return key[:n] + "…(+" + strconv.Itoa(len(key)-n) + " bytes)"
}

// Quote returns [Cut] of key as a Go string literal: quoted, with control
// characters, quotes and invalid UTF-8 escaped, so that it is one token on
// one line in any logger. Use it for loggers that do not quote values, such
// as watermill's LoggerAdapter implementations.
func Quote(key string) string { return strconv.Quote(Cut(key)) }
