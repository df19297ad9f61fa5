package main

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"
)

// width is the most columns a line of the output may take: a terminal or
// a log viewer shows it whole, and a newcomer reads it without scrolling.
const width = 120

// wrapWriter passes what is written to it on to w, a line at a time,
// breaking a line wider than width columns at spaces; the lines it makes
// are indented by two spaces, so that a wrapped sentence reads as one. A
// word wider than a line stays whole. Close writes an unfinished last
// line.
type wrapWriter struct {
	w   io.Writer
	buf []byte
}

func (ww *wrapWriter) Write(p []byte) (int, error) {
	ww.buf = append(ww.buf, p...)
	for {
		i := bytes.IndexByte(ww.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if _, err := io.WriteString(ww.w, wrapLine(string(ww.buf[:i]))+"\n"); err != nil {
			return 0, err
		}
		ww.buf = append(ww.buf[:0], ww.buf[i+1:]...)
	}
}

// Close writes what is left of a line without its newline.
func (ww *wrapWriter) Close() error {
	if len(ww.buf) == 0 {
		return nil
	}
	_, err := io.WriteString(ww.w, wrapLine(string(ww.buf)))
	ww.buf = ww.buf[:0]
	return err
}

// wrapLine breaks line at spaces into lines of at most width columns
// (runes), the later ones indented by two spaces.
func wrapLine(line string) string {
	if utf8.RuneCountInString(line) <= width {
		return line
	}
	var out strings.Builder
	cur, n := "", 0 // the line being filled and its width
	for _, word := range strings.Split(line, " ") {
		w := utf8.RuneCountInString(word)
		switch {
		case n == 0:
			cur, n = word, w
		case n+1+w <= width:
			cur, n = cur+" "+word, n+1+w
		default:
			out.WriteString(cur + "\n")
			cur, n = "  "+word, 2+w
		}
	}
	out.WriteString(cur)
	return out.String()
}
