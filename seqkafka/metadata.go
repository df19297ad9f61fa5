package seqkafka

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// Commit metadata: the offsets completed above the committed watermark.
//
// A commit carries the watermark W (every record below it is done) and a
// metadata string that lists the done ranges above W, so that the next owner
// of the partition skips them instead of replaying them. The string is
//
//	"seqsched1:" + base64(RawStd) of
//	  version byte (1) | kind byte | uvarint W | body | crc32-IEEE (4 bytes, big endian)
//
// with one of two bodies, whichever is shorter:
//
//	kindRuns:   uvarint n, then n pairs of uvarints (gap, length): a range
//	            starts gap offsets after the end of the previous one (after
//	            W for the first) and spans length offsets (length >= 1).
//	kindBitset: uvarint nbits, then ceil(nbits/8) bytes; bit i (LSB first)
//	            set means offset W+i is done.
//
// A string that does not fit MaxMetadataBytes drops its highest ranges until
// it fits, down to no ranges at all (the plain watermark, empty metadata):
// dropping a range only means its records are replayed, never skipped.
// Anything that does not decode exactly — another tool's metadata, a
// truncated or corrupted string, a watermark that is not the committed
// offset — is ignored with a warning: replay, never skip.

// MaxMetadataBytes is the longest commit metadata the consumer writes: the
// broker's default offset.metadata.max.bytes.
const MaxMetadataBytes = 4096

const (
	metaPrefix  = "seqsched1:"
	metaVersion = 1
	kindRuns    = 1
	kindBitset  = 2
	// maxDecodedSpan bounds how far above the watermark decoded ranges may
	// reach, so that a hostile string cannot make the decoder describe an
	// absurd span; 2^40 offsets is far beyond any real lag.
	maxDecodedSpan = 1 << 40
)

// ErrBadMetadata is wrapped by DecodeMetadata's errors: the string is not
// commit metadata of this package, or it is corrupt.
var ErrBadMetadata = errors.New("seqkafka: commit metadata not ours or corrupt")

// OffsetRange is the half-open range of offsets [From, To).
type OffsetRange struct{ From, To int64 }

// encodeMetadata returns the metadata string for watermark wm and done ranges
// (sorted, disjoint, non-adjacent, all >= wm+1... in practice > wm), limited to
// limit bytes. It returns "" when there are no ranges or none fits.
func encodeMetadata(wm int64, done []OffsetRange, limit int) string {
	if len(done) == 0 || wm < 0 {
		return ""
	}
	if s := encodeBest(wm, done); len(s) <= limit {
		return s
	}
	// Too long: keep the longest prefix of ranges that fits. Shorter
	// prefixes never encode longer, so binary search the count.
	lo, hi := 0, len(done) // lo fits (0 ranges = ""), hi does not
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if len(encodeBest(wm, done[:mid])) <= limit {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return ""
	}
	return encodeBest(wm, done[:lo])
}

func encodeBest(wm int64, done []OffsetRange) string {
	runs := encodeRuns(wm, done)
	// A bitset only pays when the span is dense; skip building one when it
	// would clearly be longer than the runs.
	span := done[len(done)-1].To - wm
	if span/8 < int64(len(runs)) {
		if bits := encodeBitset(wm, done); len(bits) < len(runs) {
			runs = bits
		}
	}
	return metaPrefix + base64.RawStdEncoding.EncodeToString(runs)
}

func header(kind byte, wm int64) []byte {
	b := []byte{metaVersion, kind}
	return binary.AppendUvarint(b, uint64(wm))
}

func seal(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func encodeRuns(wm int64, done []OffsetRange) []byte {
	b := header(kindRuns, wm)
	b = binary.AppendUvarint(b, uint64(len(done)))
	prev := wm
	for _, r := range done {
		b = binary.AppendUvarint(b, uint64(r.From-prev))
		b = binary.AppendUvarint(b, uint64(r.To-r.From))
		prev = r.To
	}
	return seal(b)
}

func encodeBitset(wm int64, done []OffsetRange) []byte {
	n := done[len(done)-1].To - wm
	b := header(kindBitset, wm)
	b = binary.AppendUvarint(b, uint64(n))
	start := len(b)
	b = append(b, make([]byte, (n+7)/8)...)
	bits := b[start:]
	for _, r := range done {
		for o := r.From; o < r.To; o++ {
			i := o - wm
			bits[i/8] |= 1 << (i % 8)
		}
	}
	return seal(b)
}

// DecodeMetadata parses commit metadata written by a Consumer, for tools
// that inspect a group's progress. It returns the watermark the metadata
// was written for and the done ranges above it (sorted, disjoint), or an
// error wrapping ErrBadMetadata for anything else.
func DecodeMetadata(s string) (watermark int64, done []OffsetRange, err error) {
	return decodeMetadata(s)
}

func decodeMetadata(s string) (int64, []OffsetRange, error) {
	rest, ok := strings.CutPrefix(s, metaPrefix)
	if !ok {
		return 0, nil, fmt.Errorf("%w: no %q prefix", ErrBadMetadata, metaPrefix)
	}
	b, err := base64.RawStdEncoding.Strict().DecodeString(rest)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrBadMetadata, err)
	}
	if len(b) < 2+1+4 {
		return 0, nil, fmt.Errorf("%w: too short", ErrBadMetadata)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return 0, nil, fmt.Errorf("%w: checksum mismatch", ErrBadMetadata)
	}
	if body[0] != metaVersion {
		return 0, nil, fmt.Errorf("%w: version %d", ErrBadMetadata, body[0])
	}
	kind := body[1]
	r := reader{b: body[2:]}
	wmU := r.uvarint()
	if r.err != nil || wmU > 1<<62 {
		return 0, nil, fmt.Errorf("%w: bad watermark", ErrBadMetadata)
	}
	wm := int64(wmU)
	var done []OffsetRange
	switch kind {
	case kindRuns:
		n := r.uvarint()
		if r.err != nil || n == 0 || n > uint64(len(r.b)) {
			return 0, nil, fmt.Errorf("%w: bad range count", ErrBadMetadata)
		}
		done = make([]OffsetRange, 0, n)
		prev := wm
		for i := uint64(0); i < n; i++ {
			gap, length := r.uvarint(), r.uvarint()
			if r.err != nil || length == 0 || (i > 0 && gap == 0) ||
				gap > maxDecodedSpan || length > maxDecodedSpan {
				return 0, nil, fmt.Errorf("%w: bad range %d", ErrBadMetadata, i)
			}
			from := prev + int64(gap)
			to := from + int64(length)
			if to-wm > maxDecodedSpan {
				return 0, nil, fmt.Errorf("%w: ranges too wide", ErrBadMetadata)
			}
			done = append(done, OffsetRange{from, to})
			prev = to
		}
	case kindBitset:
		n := r.uvarint()
		if r.err != nil || n == 0 || (n+7)/8 != uint64(len(r.b)) {
			return 0, nil, fmt.Errorf("%w: bad bitset length", ErrBadMetadata)
		}
		bits := r.b
		r.b = nil
		for i := int64(0); i < int64(n); i++ {
			if bits[i/8]&(1<<(i%8)) == 0 {
				continue
			}
			o := wm + i
			if k := len(done); k > 0 && done[k-1].To == o {
				done[k-1].To++
			} else {
				done = append(done, OffsetRange{o, o + 1})
			}
		}
		if len(done) == 0 || done[len(done)-1].To != wm+int64(n) {
			return 0, nil, fmt.Errorf("%w: bitset not minimal", ErrBadMetadata)
		}
	default:
		return 0, nil, fmt.Errorf("%w: kind %d", ErrBadMetadata, kind)
	}
	if len(r.b) != 0 {
		return 0, nil, fmt.Errorf("%w: %d trailing bytes", ErrBadMetadata, len(r.b))
	}
	return wm, done, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = ErrBadMetadata
		return 0
	}
	r.b = r.b[n:]
	return v
}
