package restore

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrylabs/ferry/manifest"
)

// maxRank bounds the ranks a rank list may name (manifest ranks are at most
// 2^24).
const maxRank = 1 << 24

// RankSet is a set of training ranks, as `--ranks 0-3,8` names it.
type RankSet struct {
	spans [][2]int // inclusive, sorted, non-overlapping
}

// ParseRanks parses a comma-separated list of ranks and inclusive ranges
// ("0-3,8").
func ParseRanks(s string) (RankSet, error) {
	var spans [][2]int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return RankSet{}, fmt.Errorf("rank list %q: empty item", s)
		}
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := parseRank(lo)
		if err != nil {
			return RankSet{}, fmt.Errorf("rank list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseRank(hi); err != nil {
				return RankSet{}, fmt.Errorf("rank list %q: %w", s, err)
			}
			if b < a {
				return RankSet{}, fmt.Errorf("rank list %q: range %s ends before it starts", s, item)
			}
		}
		spans = append(spans, [2]int{a, b})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	merged := spans[:1]
	for _, sp := range spans[1:] {
		last := &merged[len(merged)-1]
		if sp[0] <= last[1]+1 {
			last[1] = max(last[1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	return RankSet{spans: merged}, nil
}

func parseRank(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > maxRank {
		return 0, fmt.Errorf("%q is not a rank (0..%d)", s, maxRank)
	}
	return n, nil
}

// RankRange returns the set of ranks [lo, hi).
func RankRange(lo, hi int) RankSet {
	if hi <= lo {
		return RankSet{}
	}
	return RankSet{spans: [][2]int{{lo, hi - 1}}}
}

// Contains reports whether rank is in the set.
func (r RankSet) Contains(rank int) bool {
	i := sort.Search(len(r.spans), func(i int) bool { return r.spans[i][1] >= rank })
	return i < len(r.spans) && r.spans[i][0] <= rank
}

// Empty reports whether the set has no rank.
func (r RankSet) Empty() bool { return len(r.spans) == 0 }

// String formats the set as ParseRanks reads it.
func (r RankSet) String() string {
	var parts []string
	for _, sp := range r.spans {
		if sp[0] == sp[1] {
			parts = append(parts, strconv.Itoa(sp[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", sp[0], sp[1]))
		}
	}
	return strings.Join(parts, ",")
}

// Filter returns the function Options.Ranks takes.
func (r RankSet) Filter() func(rank *int) bool {
	return func(rank *int) bool { return rank != nil && r.Contains(*rank) }
}

// Selection is what one node of a job restores from a step.
type Selection struct {
	// All is true when the node needs every file; Reason says why.
	All    bool
	Reason string
	// Ranks holds the ranks whose files the node needs (with All false);
	// files without a rank are always restored.
	Ranks RankSet
	// World is the world size the step was written with, as its files
	// show (the highest rank plus one); 0 when no file has a rank.
	World int
}

var megatronRankDir = regexp.MustCompile(`^mp_rank_\d+$`)

// SelectForNode decides what node nodeRank of a nodes-node job needs of a
// step, assuming the job has the same ranks per node for its world size:
//
//   - Layouts that reshard at load need every file on every node: PyTorch
//     DCP (".distcp" files with a ".metadata", also Composer's and
//     Megatron's sharded checkpoints) and Megatron's "mp_rank_XX" folders,
//     whose numbers are model-parallel ranks every data-parallel replica
//     reads.
//   - A step whose files have no rank is all shared: every file.
//   - Otherwise the step's world size W is its highest rank plus one, and W
//     must divide evenly over the nodes: with R = W/nodes ranks per node,
//     node K restores the files of ranks [K*R, (K+1)*R) plus every file
//     without a rank. When it does not divide, SelectForNode fails rather
//     than guess; name the ranks with Options.Ranks instead.
func SelectForNode(m *manifest.Manifest, nodes, nodeRank int) (Selection, error) {
	if nodes < 1 || nodeRank < 0 || nodeRank >= nodes {
		return Selection{}, fmt.Errorf("node rank %d of %d nodes: want 0 <= rank < nodes", nodeRank, nodes)
	}
	world, distcp, metadata, megatron := 0, false, false, false
	for _, f := range m.Files {
		base := path.Base(f.Path)
		switch {
		case strings.HasSuffix(base, ".distcp"):
			distcp = true
		case base == ".metadata":
			metadata = true
		}
		if f.Rank != nil {
			world = max(world, *f.Rank+1)
			for _, dir := range strings.Split(path.Dir(f.Path), "/") {
				if megatronRankDir.MatchString(dir) {
					megatron = true
				}
			}
		}
	}
	switch {
	case m.Layout == "dcp":
		return Selection{All: true, World: world, Reason: "the layout (PyTorch DCP, recorded in the manifest) reshards at load: every node reads every file"}, nil
	case distcp && metadata:
		return Selection{All: true, World: world, Reason: "the layout (PyTorch DCP) reshards at load: every node reads every file"}, nil
	case megatron:
		return Selection{All: true, World: world, Reason: "Megatron mp_rank folders hold model-parallel ranks that every data-parallel replica reads"}, nil
	case world == 0:
		return Selection{All: true, Reason: "no file has a rank: every file is shared"}, nil
	case world%nodes != 0:
		return Selection{World: world}, fmt.Errorf("step %d was written by %d ranks, which do not split evenly over %d nodes: name the ranks this node needs with --ranks, or restore every file without --nodes", m.Step, world, nodes)
	}
	per := world / nodes
	return Selection{World: world, Ranks: RankRange(nodeRank*per, (nodeRank+1)*per)}, nil
}

// String describes the selection for logs and summaries.
func (s Selection) String() string {
	if s.All {
		return "all files (" + s.Reason + ")"
	}
	return fmt.Sprintf("ranks %s of %d and shared files", s.Ranks, s.World)
}
