package peer

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
)

// plan is what one node restores, as it tells its peers: the step, the
// range size, the objects it fetches, in the order it fetches them, and
// those it already holds (files in place with their manifest size), which
// it serves.
type plan struct {
	Step  int64    `json:"step"`
	Chunk int64    `json:"chunk"`
	Files []object `json:"files"`
	Held  []object `json:"held,omitempty"`
	// Seed marks a node that only serves (Seed): it never finishes a
	// restore, so nobody waits for it to.
	Seed bool `json:"seed,omitempty"`
}

// object is one object a node fetches.
type object struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// chunks is how many ranges of size chunk an object of size bytes has
// (one for an empty object).
func chunks(size, chunk int64) int64 {
	return max((size+chunk-1)/chunk, 1)
}

// assignment says which node serves each range of each object: of the
// nodes that hold the object, else of those that need it (and fetch the
// range from the bucket), the one with the highest rendezvous hash of its
// address and the range. Every
// node computes it from the same plans, so they agree without a
// coordinator; when their views of who joined differ, a range is asked of
// a node that does not hold it, which answers at once, and the asker
// fetches it from the bucket.
type assignment struct {
	self    string
	chunk   int64
	needers map[string][]string // object key -> addresses of the nodes that fetch it
	holders map[string][]string // object key -> addresses of the nodes that hold it
}

func newAssignment(self string, chunk int64, plans map[string]*plan) *assignment {
	a := &assignment{self: self, chunk: chunk, needers: map[string][]string{}, holders: map[string][]string{}}
	for addr, p := range plans {
		for _, f := range p.Files {
			a.needers[f.Key] = append(a.needers[f.Key], addr)
		}
		for _, f := range p.Held {
			a.holders[f.Key] = append(a.holders[f.Key], addr)
		}
	}
	return a
}

// owner returns the address of the node that serves range i of key, ""
// when no node of the plans needs or holds key.
func (a *assignment) owner(key string, i int64) string {
	nodes := a.holders[key]
	if len(nodes) == 0 {
		nodes = a.needers[key]
	}
	best, bestH := "", uint64(0)
	for _, n := range nodes {
		if h := rendezvous(n, key, i); best == "" || h > bestH || (h == bestH && n > best) {
			best, bestH = n, h
		}
	}
	return best
}

// shared reports whether another node than this one needs or holds key:
// only then is a range of it worth a spool or a peer.
func (a *assignment) shared(key string) bool {
	if len(a.holders[key]) > 0 {
		return true
	}
	for _, n := range a.needers[key] {
		if n != a.self {
			return true
		}
	}
	return false
}

func rendezvous(node, key string, i int64) uint64 {
	h := sha256.New()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(i, 10)))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}
