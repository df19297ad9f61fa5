package seqkafka

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// rangesFromBits turns fuzz bytes into sorted, disjoint, non-adjacent done
// ranges above wm: each byte pair is (gap-1, length-1).
func rangesFromBits(wm int64, b []byte) []OffsetRange {
	var out []OffsetRange
	prev := wm
	for i := 0; i+1 < len(b); i += 2 {
		from := prev + int64(b[i]) + 1
		to := from + int64(b[i+1]) + 1
		out = append(out, OffsetRange{from, to})
		prev = to
	}
	return out
}

func FuzzMetadataRoundTrip(f *testing.F) {
	f.Add(int64(0), []byte{0, 0})
	f.Add(int64(1234567), []byte{3, 200, 0, 0, 9, 1})
	f.Add(int64(1<<40), make([]byte, 4000))
	f.Fuzz(func(t *testing.T, wm int64, bits []byte) {
		if wm < 0 || wm > 1<<60 {
			return
		}
		done := rangesFromBits(wm, bits)
		s := encodeMetadata(wm, done, MaxMetadataBytes)
		if len(s) > MaxMetadataBytes {
			t.Fatalf("len = %d; want <= %d", len(s), MaxMetadataBytes)
		}
		if s == "" {
			if len(done) > 0 && len(encodeBest(wm, done[:1])) <= MaxMetadataBytes {
				t.Fatalf("empty metadata although one range fits")
			}
			return
		}
		gotWM, got, err := DecodeMetadata(s)
		if err != nil {
			t.Fatalf("decode(encode) = %v", err)
		}
		if gotWM != wm {
			t.Fatalf("watermark = %d; want %d", gotWM, wm)
		}
		// What was kept is a prefix of what was given, never more.
		if len(got) > len(done) || !slices.Equal(got, done[:len(got)]) {
			t.Fatalf("ranges = %v; want a prefix of %v", got, done)
		}
		if len(got) < len(done) && len(encodeBest(wm, done[:len(got)+1])) <= MaxMetadataBytes {
			t.Fatalf("kept %d of %d ranges although %d fit", len(got), len(done), len(got)+1)
		}
	})
}

func FuzzMetadataDecodeNeverPanics(f *testing.F) {
	f.Add(encodeMetadata(10, []OffsetRange{{12, 20}, {25, 26}}, MaxMetadataBytes))
	f.Add(encodeMetadata(0, []OffsetRange{{1, 2}, {3, 4}, {5, 6}, {7, 8}}, MaxMetadataBytes))
	f.Add("kgo-0123456789abcdef")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		wm, done, err := DecodeMetadata(s)
		if err != nil {
			if !errors.Is(err, ErrBadMetadata) {
				t.Fatalf("err = %v; want it to wrap ErrBadMetadata", err)
			}
			return
		}
		prev := wm
		for _, r := range done {
			if r.From < prev || r.To <= r.From {
				t.Fatalf("ranges %v not sorted and disjoint above %d", done, wm)
			}
			prev = r.To
		}
	})
}

func TestMetadataTooManyRangesDropsTheHighest(t *testing.T) {
	var done []OffsetRange
	for o := int64(100); o < 100+2*20000; o += 2 { // 20,000 single-offset ranges
		done = append(done, OffsetRange{o + 1, o + 2})
	}
	s := encodeMetadata(100, done, MaxMetadataBytes)
	if len(s) > MaxMetadataBytes || s == "" {
		t.Fatalf("len = %d; want 1..%d", len(s), MaxMetadataBytes)
	}
	_, got, err := DecodeMetadata(s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, done[:len(got)]) || len(got) < 1000 {
		t.Fatalf("kept %d ranges; want a prefix of at least 1000", len(got))
	}
}

func TestMetadataCorruptIsRejected(t *testing.T) {
	good := encodeMetadata(7, []OffsetRange{{9, 12}, {20, 21}}, MaxMetadataBytes)
	cases := map[string]string{
		"foreign":    "kgo-deadbeef",
		"truncated":  good[:len(good)-3],
		"bad base64": good[:len(metaPrefix)] + "!!" + good[len(metaPrefix)+2:],
		"flipped":    good[:len(good)-1] + string(good[len(good)-1]^1),
	}
	for name, s := range cases {
		if _, _, err := DecodeMetadata(s); !errors.Is(err, ErrBadMetadata) {
			t.Errorf("%s: err = %v; want ErrBadMetadata", name, err)
		}
	}
	if !strings.HasPrefix(good, metaPrefix) {
		t.Fatalf("good = %q", good)
	}
}
