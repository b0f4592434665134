package detect

import (
	"regexp"
	"strconv"
	"strings"
)

// megatronLayout: Megatron-LM (and Megatron-Core) checkpoints.
//
//   - Steps are folders "iter_{NNNNNNN}" (seven or more digits) in the root;
//     the number is the iteration.
//   - Marker: "latest_checkpointed_iteration.txt" in the root, which rank 0
//     writes after the save with the iteration number. A step is finished
//     when the tracker names it or a later iteration and is newer than
//     every file of the folder (a folder written again after a rollback
//     waits for the tracker to be rewritten). A tracker holding
//     "release" names no step. Rank 0 updates the tracker after a barrier
//     that every rank reaches once its files are written, so the tracker
//     changing to name an iteration while the agent watches proves that
//     iteration's file set (ProofMarker). A tracker that already named it,
//     or a later one, when first seen proves nothing: a run resumed from
//     an older iteration writes its next saves under a tracker that names
//     a later one from the start, and the settle window decides.
//   - Files: everything in the folder, both the legacy format
//     ("mp_rank_{TT}[_{PPP}]/model_optim_rng.pt", "distrib_optim.pt") and
//     torch_dist ("__{R}_{n}.distcp", ".metadata", "common.pt",
//     "metadata.json"). Ranks by RankOf: "mp_rank_{TT}" folders give the
//     tensor-parallel rank, distcp files the writer's rank.
//   - Record: a fresh tracker implies model_optim_rng.pt in every
//     mp_rank folder and no gap in the rank indexes; a torch_dist
//     folder's .metadata is DCP's record (megatronrecord.go).
//   - Pointer: Generated tracker file holding the iteration in decimal
//     without a newline, as Megatron writes it.
type megatronLayout struct {
	// seen is set once the tracker was read; last is what it named then
	// (-1: absent or no step).
	seen bool
	last int64
	// changedTo holds the iterations the tracker was seen changing to.
	changedTo map[int64]bool
	// rec reads torch_dist folders' .metadata (megatronrecord.go).
	rec dcpRecords
}

var (
	megatronDir     = regexp.MustCompile(`^iter_(\d{7,})$`)
	megatronTracked = regexp.MustCompile(`^(\d+)$`)
)

const megatronTracker = "latest_checkpointed_iteration.txt"

func (*megatronLayout) Name() string { return "megatron" }

func (*megatronLayout) stepFolder(name string) bool { return megatronDir.MatchString(name) }

func (*megatronLayout) Recognize(t *Tree) bool {
	if len(numberedDirs(t, megatronDir)) > 0 {
		return true
	}
	_, ok := t.Get(megatronTracker)
	return ok
}

func (l *megatronLayout) Steps(t *Tree) []Candidate {
	latest, haveLatest := pointerStep(t, megatronTracker, megatronTracked)
	l.observe(latest, haveLatest)
	var out []Candidate
	for n, root := range numberedDirs(t, megatronDir) {
		c := folderStep(t, root, n)
		c.Finished = haveLatest && latest >= n
		if l.changedTo[n] {
			c.Proof = ProofMarker
		}
		if !c.Finished {
			c.Waiting = megatronTracker + " does not name iteration " + strconv.FormatInt(n, 10) + " or later"
		}
		requireFresh(t, &c, megatronTracker, nil)
		requireRankFolders(t, &c, root, l.rec.multiNode)
		l.requireTorchDist(t, &c, root)
		c.Moved = haveLatest && latest > n
		c.Step.Generated = []Generated{{RelPath: megatronTracker, Data: []byte(strconv.FormatInt(n, 10))}}
		out = append(out, c)
	}
	return out
}

func (*megatronLayout) pointer() (string, func([]byte) (int64, bool)) {
	return megatronTracker, func(b []byte) (int64, bool) {
		m := megatronTracked.FindStringSubmatch(strings.TrimSpace(string(b)))
		if m == nil {
			return 0, false
		}
		return parseStep(m[1])
	}
}

// observe records what the tracker names now and whether that is a change
// since the last evaluation.
func (l *megatronLayout) observe(latest int64, ok bool) {
	if !ok {
		latest = -1
	}
	if l.seen && latest != l.last && latest >= 0 {
		if l.changedTo == nil {
			l.changedTo = map[int64]bool{}
		}
		l.changedTo[latest] = true
	}
	l.seen, l.last = true, latest
}
