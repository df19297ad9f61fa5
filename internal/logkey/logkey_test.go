package logkey_test

import (
	"strings"
	"testing"

	"github.com/seqsched/seqsched/internal/logkey"
)

func TestCutKeepsShortKeys(t *testing.T) {
	for _, k := range []string{"", "k1", strings.Repeat("a", logkey.Max)} {
		if got := logkey.Cut(k); got != k {
			t.Errorf("Cut(%q) = %q; want it unchanged", k, got)
		}
	}
}

func TestCutBoundsLongKeys(t *testing.T) {
	k := strings.Repeat("a", 1<<16)
	want := strings.Repeat("a", logkey.Max) + "…(+65472 bytes)"
	if got := logkey.Cut(k); got != want {
		t.Errorf("Cut(64 KiB key) = %q; want %q", got, want)
	}
}

func TestCutNeverSplitsARune(t *testing.T) {
	k := strings.Repeat("a", logkey.Max-1) + "é" + "tail" // é straddles the bound
	want := strings.Repeat("a", logkey.Max-1) + "…(+6 bytes)"
	if got := logkey.Cut(k); got != want {
		t.Errorf("Cut = %q; want %q", got, want)
	}
}

func TestQuoteEscapesLineBreaksAndQuotes(t *testing.T) {
	got := logkey.Quote("a\nlevel=ERROR msg=\"forged\"")
	want := `"a\nlevel=ERROR msg=\"forged\""`
	if got != want {
		t.Errorf("Quote = %s; want %s", got, want)
	}
	if strings.ContainsAny(got, "\n\r") {
		t.Errorf("Quote = %q holds a line break", got)
	}
}
