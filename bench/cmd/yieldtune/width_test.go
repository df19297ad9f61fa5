package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rule line was 520 columns wide: wrapped, no line is wider than
// width, the words are the same and in order, and the lines after the
// first are indented by two spaces.
func TestWrapLineKeepsEveryLineWithinTheWidth(t *testing.T) {
	words := strings.Fields(ruleText(figP99, 10, true))
	line := "rule: " + strings.Join(words, " ")
	require.Greater(t, utf8.RuneCountInString(line), 2*width, "a line that needs three lines or more")
	got := strings.Split(wrapLine(line), "\n")
	assert.GreaterOrEqual(t, len(got), 3)
	for i, l := range got {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), width, "line %d: %q", i, l)
		if i > 0 {
			assert.True(t, strings.HasPrefix(l, "  ") && l[2] != ' ', "line %d is indented by two spaces: %q", i, l)
		}
		if i < len(got)-1 { // a line ends where the next word would not fit
			next := strings.Fields(got[i+1])[0]
			assert.Greater(
				t,
				utf8.RuneCountInString(l)+1+utf8.RuneCountInString(next),
				width,
				"line %d could take %q",
				i,
				next,
			)
		}
	}
	assert.Equal(t, strings.Fields(line), strings.Fields(strings.Join(got, " ")), "the same words, in order")
}

func TestWrapLineLeavesShortLinesAndLongWordsAlone(t *testing.T) {
	short := strings.Repeat("x", width)
	assert.Equal(t, short, wrapLine(short), "exactly width columns fit")
	long := strings.Repeat("y", width+5)
	assert.Equal(
		t,
		"a\n  "+long+"\n  b",
		wrapLine("a "+long+" b"),
		"a word wider than a line stays whole, on its own line",
	)
	table := "     10  176.08ms  130ms–189.04ms  default"
	assert.Equal(t, table, wrapLine(table), "a table line that fits keeps its spaces")
}

// The writer wraps whole lines, however the writes split them, and Close
// writes a last line that has no newline.
func TestWrapWriterWrapsLinesWrittenInPieces(t *testing.T) {
	var out bytes.Buffer
	ww := &wrapWriter{w: &out}
	line := strings.Repeat("word ", 30) + "end"
	for _, piece := range []string{line[:7], line[7:100], line[100:] + "\nshort\nlast"} {
		n, err := ww.Write([]byte(piece))
		require.NoError(t, err)
		assert.Equal(t, len(piece), n)
	}
	require.NoError(t, ww.Close())
	assert.Equal(t, wrapLine(line)+"\nshort\nlast", out.String())
}
