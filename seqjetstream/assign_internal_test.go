package seqjetstream

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// The guarantee of assign: balanced (no member more than one partition
// above another), stable (a balanced assignment, claimed, comes back
// unchanged), and sticky: a join moves ⌊P/n⌋ partitions, the fewest that
// balance needs, all to the joiner (the shares above P/n go to the
// members that claim most, wherever the joiner's name sorts); a leave
// moves only the leaver's.

// claimsOf turns an assignment into the claims that carry it.
func claimsOf(parts, owner []string, members []string) map[string][]string {
	c := make(map[string][]string)
	for _, m := range members {
		c[m] = []string{}
	}
	for i, m := range owner {
		c[m] = append(c[m], parts[i])
	}
	return c
}

func spread(owner []string, members []string) (lo, hi int) {
	n := make(map[string]int)
	for _, m := range owner {
		n[m]++
	}
	lo, hi = len(owner), 0
	for _, m := range members {
		lo, hi = min(lo, n[m]), max(hi, n[m])
	}
	return lo, hi
}

func moved(a, b []string) (n int) {
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func TestAssignIsBalancedStableAndMovesOnlyWhatAJoinOrLeaveNeeds(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		np := 1 + rng.IntN(40)
		parts := make([]string, np)
		for i := range parts {
			parts[i] = fmt.Sprintf("S.part-%d", i)
		}
		next := 0
		newMember := func() string { next++; return fmt.Sprintf("m%d-%03d", rng.Uint64(), next) } // joiners sort anywhere
		members := []string{newMember()}
		owner := assign(parts, claimsOf(parts, nil, members))
		for step := range 30 {
			lo, hi := spread(owner, members)
			if hi-lo > 1 {
				t.Fatalf("seed %d step %d: %d members own %d..%d of %d partitions; want within one", seed, step, len(members), lo, hi, np)
			}
			if again := assign(parts, claimsOf(parts, owner, members)); !slices.Equal(again, owner) {
				t.Fatalf("seed %d step %d: a balanced assignment, claimed, moved %d partitions", seed, step, moved(owner, again))
			}
			if len(members) == 1 || (len(members) < 9 && rng.IntN(2) == 0) {
				j := newMember()
				members = append(members, j)
				after := assign(parts, claimsOf(parts, owner, members))
				n := len(members)
				if m, least := moved(owner, after), np/n; m != least {
					t.Fatalf("seed %d step %d: a join %d→%d of %d partitions moved %d; want %d, the fewest that balance needs", seed, step, n-1, n, np, m, least)
				}
				for i := range after {
					if after[i] != owner[i] && after[i] != j {
						t.Fatalf("seed %d step %d: a join moved %s from %s to %s, not to the joiner", seed, step, parts[i], owner[i], after[i])
					}
				}
				owner = after
				continue
			}
			k := rng.IntN(len(members))
			gone := members[k]
			members = slices.Delete(members, k, k+1)
			claims := claimsOf(parts, owner, append(slices.Clone(members), gone))
			delete(claims, gone)
			after := assign(parts, claims)
			for i := range after {
				if after[i] != owner[i] && owner[i] != gone {
					t.Fatalf("seed %d step %d: a leave %d→%d moved %s from %s, which stayed", seed, step, len(members)+1, len(members), parts[i], owner[i])
				}
			}
			owner = after
		}
	}
}

// The cases: 3→4 members of 12 partitions moves 3; 5→4 of 16
// moves the leaver's 3 or 4.
func TestAssignJoinAndLeaveCounts(t *testing.T) {
	parts := func(n int) []string {
		var p []string
		for i := range n {
			p = append(p, fmt.Sprint("S.part-", i))
		}
		return p
	}
	p12 := parts(12)
	three := []string{"a", "b", "c"}
	before := assign(p12, claimsOf(p12, nil, three))
	after := assign(p12, claimsOf(p12, before, append(three, "d")))
	if m := moved(before, after); m != 3 {
		t.Errorf("join 3→4 of 12 moved %d; want 3", m)
	}
	p16 := parts(16)
	five := []string{"a", "b", "c", "d", "e"}
	before = assign(p16, claimsOf(p16, nil, five))
	claims := claimsOf(p16, before, five)
	leaver := claims["c"]
	delete(claims, "c")
	after = assign(p16, claims)
	if m := moved(before, after); m != len(leaver) {
		t.Errorf("leave 5→4 of 16 moved %d; want the leaver's %d", m, len(leaver))
	}
}

// Claims that conflict (two members claim one partition while their
// views differ) still give every partition to exactly one member,
// balanced, and the same on every instance: the result depends on the
// claims only, not on the order they were read in.
func TestAssignResolvesConflictingClaims(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		np, n := 1+rng.IntN(20), 1+rng.IntN(6)
		var parts []string
		for i := range np {
			parts = append(parts, fmt.Sprint("S.p", i))
		}
		claims := make(map[string][]string)
		for m := range n {
			var c []string
			for _, p := range parts {
				if rng.IntN(3) == 0 {
					c = append(c, p)
				}
			}
			claims[fmt.Sprint("m", m)] = c
		}
		owner := assign(parts, claims)
		members := slices.Sorted(maps.Keys(claims))
		if lo, hi := spread(owner, members); hi-lo > 1 {
			t.Fatalf("%d members own %d..%d; want within one", n, lo, hi)
		}
		shuffled := make(map[string][]string)
		for m, c := range claims {
			c = slices.Clone(c)
			rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
			shuffled[m] = c
		}
		if again := assign(parts, shuffled); !slices.Equal(again, owner) {
			t.Fatalf("the same claims in another order gave another assignment")
		}
	}
}
