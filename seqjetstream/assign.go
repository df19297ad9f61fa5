package seqjetstream

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// assign returns the member each partition of parts goes to, given each
// member's claim (partitions by name; a name not in parts is ignored).
// Every member computes the same result from the same claims. It is
// sticky and balanced:
//
//   - shares: with P partitions and n members, each member gets P/n,
//     and the P%n members that claim most (then by key) one more;
//   - a partition claimed by several members goes to the one that ranks
//     it highest (see rank), and each member keeps, of what it claims,
//     as much as its share, those it ranks highest;
//   - every partition left goes, in order, to the member with room that
//     ranks it highest.
//
// So claims that are already a balanced assignment come back unchanged;
// a member that joins takes its share, ⌊P/n⌋, the fewest that balance
// needs, from those above theirs (the shares above P/n go to those that
// claim most, never to the joiner, who claims none; the others claim
// P/(n-1)+1 or P/(n-1) ≥ P/n+1 each when the joiner's share is taken);
// one that leaves leaves its own to the others, and none of theirs
// moves (each claims at most P/(n-1)+1, and the P%(n-1) ≥ P%n members
// that claim most get that much room).
func assign(parts []string, claims map[string][]string) []string {
	members := make([]string, 0, len(claims))
	for m := range claims {
		members = append(members, m)
	}
	slices.Sort(members)
	n, np := len(members), len(parts)
	index := make(map[string]int, np)
	for i, name := range parts {
		index[name] = i
	}
	owner := make([]int, np) // member index; -1 for none
	for i := range owner {
		owner[i] = -1
	}
	for mi, m := range members {
		for _, name := range claims[m] {
			pi, ok := index[name]
			if !ok {
				continue
			}
			if o := owner[pi]; o < 0 || rank(m, name) > rank(members[o], name) {
				owner[pi] = mi
			}
		}
	}
	held := make([]int, n)
	for _, o := range owner {
		if o >= 0 {
			held[o]++
		}
	}
	// The shares: P/n each, and one more for the P%n that claim most.
	byClaims := make([]int, n)
	for i := range byClaims {
		byClaims[i] = i
	}
	slices.SortStableFunc(byClaims, func(x, y int) int { return cmp.Compare(held[y], held[x]) })
	share := make([]int, n)
	for r, mi := range byClaims {
		share[mi] = np / n
		if r < np%n {
			share[mi]++
		}
	}
	// Each keeps, of what it claims, its share: those it ranks highest.
	for mi, m := range members {
		if held[mi] <= share[mi] {
			continue
		}
		var mine []int
		for pi, o := range owner {
			if o == mi {
				mine = append(mine, pi)
			}
		}
		slices.SortFunc(mine, func(x, y int) int { return cmp.Compare(rank(m, parts[y]), rank(m, parts[x])) })
		for _, pi := range mine[share[mi]:] {
			owner[pi] = -1
		}
		held[mi] = share[mi]
	}
	// What is left goes to the members with room.
	out := make([]string, np)
	for pi, name := range parts {
		if owner[pi] < 0 {
			best := -1
			for mi, m := range members {
				if held[mi] < share[mi] && (best < 0 || rank(m, name) > rank(members[best], name)) {
					best = mi
				}
			}
			owner[pi] = best
			held[best]++
		}
		out[pi] = members[owner[pi]]
	}
	return out
}

// rank is how much member wants partition: a hash of both, the same on
// every instance (rendezvous hashing), so that fresh assignments spread
// evenly and ties are rare.
func rank(member, partition string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(partition))
	x := h.Sum64()
	// fnv's low bits mix poorly for short inputs: finish with splitmix64's.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
