package seqjetstream

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// check verifies a's links: from lru to mru, every entry once, each
// indexed under its key, in the order of want (least recently updated
// first), if want is not nil.
func (a *appliedKeys) check(t *testing.T, want []string) {
	t.Helper()
	if len(a.index) > a.max || len(a.ents) > a.max {
		t.Fatalf("%d keys, %d entries; want at most %d", len(a.index), len(a.ents), a.max)
	}
	var order []string
	prev := int32(-1)
	for i := a.lru; i >= 0; i = a.ents[i].next {
		e := a.ents[i]
		if e.prev != prev {
			t.Fatalf("entry %d (%s): prev %d; want %d", i, e.key, e.prev, prev)
		}
		if j, ok := a.index[e.key]; !ok || j != i {
			t.Fatalf("entry %d (%s) indexed as %d, %v", i, e.key, j, ok)
		}
		order = append(order, e.key)
		prev = i
		if len(order) > len(a.index) {
			t.Fatalf("a cycle in the update order")
		}
	}
	if prev != a.mru || len(order) != len(a.index) {
		t.Fatalf("walked %d entries to %d; want %d to mru %d", len(order), prev, len(a.index), a.mru)
	}
	if want != nil && fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("update order %v; want %v", order, want)
	}
}

func TestAppliedKeysForgetTheKeyUpdatedLeastRecently(t *testing.T) {
	var a appliedKeys
	a.init(3)
	a.add("a", 1, false)
	a.add("b", 2, false)
	a.add("c", 3, true)
	a.check(t, []string{"a", "b", "c"})
	a.add("a", 4, false) // refreshed: b is now the oldest
	a.check(t, []string{"b", "c", "a"})
	a.add("d", 5, false)
	a.check(t, []string{"c", "a", "d"})
	if _, _, ok := a.get("b"); ok {
		t.Fatalf("b remembered past the cap")
	}
	a.add("a", 2, false) // a lower sequence (a High message overtook it) refreshes, keeps 4
	a.check(t, []string{"c", "d", "a"})
	for key, want := range map[string]uint64{"a": 4, "c": 3, "d": 5} {
		if seq, _, ok := a.get(key); !ok || seq != want {
			t.Errorf("get(%s) = %d, %v; want %d", key, seq, ok, want)
		}
	}
	if _, termed, _ := a.get("c"); !termed {
		t.Errorf("c: terminated forgotten")
	}
	a.reset()
	a.check(t, []string{})
	if _, _, ok := a.get("a"); ok || a.len() != 0 {
		t.Fatalf("reset left %d keys", a.len())
	}
	a.add("e", 6, false)
	a.check(t, []string{"e"})
}

// TestAppliedKeysStayBoundedWithAMillionKeys feeds a million keys, new
// ones and old ones again, through a memory of 4,000: it never holds
// more, and always the 4,000 keys updated last.
func TestAppliedKeysStayBoundedWithAMillionKeys(t *testing.T) {
	const max, n = 4000, 1 << 20
	var a appliedKeys
	a.init(max)
	rng := rand.New(rand.NewPCG(1, 2))
	last := make(map[string]int) // key → when it was updated last
	keys := make([]string, 0, n)
	for i := range n {
		var k string
		if len(keys) > 0 && rng.IntN(4) == 0 {
			k = keys[len(keys)-1-rng.IntN(min(len(keys), 2*max))] // one seen lately, maybe forgotten
		} else {
			k = fmt.Sprint("key-", i)
			keys = append(keys, k)
		}
		a.add(k, uint64(i+1), false)
		last[k] = i
		if a.len() > max {
			t.Fatalf("after %d updates: %d keys; want at most %d", i+1, a.len(), max)
		}
	}
	a.check(t, nil)
	if a.len() != max {
		t.Fatalf("%d keys; want %d", a.len(), max)
	}
	// The remembered keys are the max updated last.
	oldest := n
	for i := a.lru; i >= 0; i = a.ents[i].next {
		oldest = min(oldest, last[a.ents[i].key])
	}
	forgottenLater := 0
	for k, at := range last {
		if _, _, ok := a.get(k); !ok && at > oldest {
			forgottenLater++
		}
	}
	if forgottenLater > 0 {
		t.Fatalf("%d keys updated after the oldest remembered one are forgotten", forgottenLater)
	}
}

// The key memory is bounded in bytes, not only in entries: 4,000 keys of
// 64 KiB (256 MiB of keys) leave it holding well under 2 MiB.
func TestAppliedKeysBoundTheBytesOfLongKeys(t *testing.T) {
	const n, size = 4000, 64 << 10
	var a appliedKeys
	a.init(n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := make([]byte, size)
	for i := range n {
		binary.BigEndian.PutUint32(buf, uint32(i))
		a.add(string(buf), uint64(i+1), false) // a fresh 64 KiB key each time
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(&a)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if limit := int64(n * 512); grown > limit {
		t.Fatalf("4,000 keys of 64 KiB grew the heap by %d bytes; want at most %d", grown, limit)
	}
	t.Logf("4,000 keys of 64 KiB remembered in %d bytes of heap", grown)
	binary.BigEndian.PutUint32(buf, 7)
	if seq, _, ok := a.get(string(buf)); !ok || seq != 8 {
		t.Fatalf("get(long key 7) = %d, %v; want 8, true", seq, ok)
	}
	if _, _, ok := a.get(memKey(string(buf))); ok {
		t.Fatalf("the remembered form of a long key, given as a key, found its entry")
	}
}

// A short key is kept as a copy of its own bytes, not as a window on the
// larger string it came from (a key function's substring of a payload).
func TestAppliedKeysCopyShortKeys(t *testing.T) {
	var a appliedKeys
	a.init(1)
	big := strings.Repeat("x", 1<<20)
	a.add(big[:8], 1, false)
	for k := range a.index {
		if unsafe.StringData(k) == unsafe.StringData(big) {
			t.Fatalf("the remembered key shares the 1 MiB string it was cut from")
		}
	}
}

// keyedMsg is a message with only a subject and headers: what keyOf reads.
type keyedMsg struct {
	jetstream.Msg // nil: any other method panics
	subject       string
	hdr           nats.Header
}

func (m keyedMsg) Subject() string      { return m.subject }
func (m keyedMsg) Headers() nats.Header { return m.hdr }

// The scheduler keeps the sessions of thousands of recently idle keys
// after their messages are done, each with its key, and publishers choose
// keys: a key must name its session in a bounded number of bytes, and
// still name it alone. 1,000 keys of 60 KiB through a consumer left 111 MiB
// of heap with the raw key as the session's name, 2 MiB with this.
func TestSessionKeyBytesAreBoundedWhateverTheKey(t *testing.T) {
	for name, opt := range map[string]Option{
		"header":  WithKeyHeader("Account"),
		"func":    WithKeyFunc(func(m jetstream.Msg) string { return m.Headers().Get("Account") }),
		"subject": nil,
	} {
		t.Run(name, func(t *testing.T) {
			var opts []Option
			if opt != nil {
				opts = append(opts, opt)
			}
			cfg, err := newConfig(opts)
			if err != nil {
				t.Fatal(err)
			}
			p := &partition{c: &Consumer{cfg: cfg}, idx: 3}
			of := func(key string) sessionKey {
				return p.sessionKeyOf(&held{msg: keyedMsg{subject: key, hdr: nats.Header{"Account": {key}}}})
			}
			long := func(last byte) string { return strings.Repeat("k", 1<<20-1) + string(last) }
			a1, a2, b := of(long('a')), of(long('a')), of(long('b'))
			if len(a1.key) > maxKeyBytes+1 || a1.part != 3 {
				t.Fatalf("session of a 1 MiB key: partition %d, a key of %d bytes; want 3, at most %d", a1.part, len(a1.key), maxKeyBytes+1)
			}
			if a1 != a2 {
				t.Fatal("two messages of one long key have different sessions")
			}
			if a1 == b {
				t.Fatal("two long keys differing in their last byte share a session")
			}
			if of(a1.key) == a1 {
				t.Fatal("a key equal to a long key's session name shares its session")
			}
			if edge := strings.Repeat("e", maxKeyBytes); of(edge).key != edge {
				t.Fatalf("a %d-byte key is named by %q; want its own bytes", maxKeyBytes, of(edge).key)
			}
		})
	}
}
