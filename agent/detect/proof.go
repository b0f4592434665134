package detect

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Proof is what a layout's evidence proves about a step's file set. The
// settle window is the floor for every step: only where the evidence
// covers every file may close-write detection report a step before it.
//
// Why the distinction matters: "every file that exists now is closed"
// proves nothing about files not created yet (a late rank, the next file
// of a marker-less step) or about a writer that closes a file and reopens
// it. A close shortens the wait only where something written after all
// files says that the set is final.
type Proof int

const (
	// ProofNone: nothing proves the file set final; the step is complete
	// once its files are unchanged for the settle window.
	ProofNone Proof = iota
	// ProofMarker: the marker is written by the framework's coordinator
	// after every rank finished (DCP's and Composer's sharded .metadata,
	// Megatron's tracker seen changing to name the step), or removed by
	// it then (NeMo's "-unfinished", seen removed after every write).
	ProofMarker
	// ProofRanks: the marker plus each rank's own last file prove the set
	// final once Options.ExpectedRanks ranks are accounted for (DeepSpeed,
	// Hugging Face, Composer with latest links).
	ProofRanks
	// ProofClosed: each file is a whole checkpoint of its own (the single
	// layout), so every file closed by its writer, held open by none and
	// whole by its own format proves the version final.
	ProofClosed
)

// String names the proof for status and logs.
func (p Proof) String() string {
	switch p {
	case ProofMarker:
		return "marker written after every file"
	case ProofRanks:
		return "marker and every expected rank's files"
	case ProofClosed:
		return "every file closed by its writer"
	}
	return "settle window"
}

// fastPath reports whether close-write detection may complete c before
// the settle window ends: its evidence covers every file.
func (e *engine) fastPath(c *Candidate) bool {
	switch {
	case !c.Finished:
		return false
	case c.ByTrainer:
		// The trainer's word is no marker: --no-marker (the default on
		// nodes other than 0) leaves it its closes, not the settle window.
		return true
	case e.opts.NoMarker:
		return false
	}
	switch c.Proof {
	case ProofMarker, ProofClosed:
		return true
	case ProofRanks:
		return e.opts.ExpectedRanks > 0
	}
	return false
}

var writerMega = regexp.MustCompile(`^mp_rank_(\d+)_(\d+)$`)

// writerOf names the process that wrote a file, when its path says: the
// rank RankOf gives, else the data- and model-parallel ranks of a
// DeepSpeed ZeRO file, else the tensor- and pipeline-parallel ranks of a
// Megatron "mp_rank_TT_PPP" folder. "" for a file no name ties to one
// writer. Options.ExpectedRanks counts these: with model parallelism the
// global rank is not in the names, but each writer still is.
func writerOf(relPath string) string {
	if r := RankOf(relPath); r != nil {
		return "rank " + strconv.Itoa(*r)
	}
	elems := strings.Split(relPath, "/")
	if m := rankZero.FindStringSubmatch(elems[len(elems)-1]); m != nil {
		d, _ := strconv.Atoi(m[1])
		mp, _ := strconv.Atoi(m[2])
		return fmt.Sprintf("zero dp %d mp %d", d, mp)
	}
	for _, dir := range elems[:len(elems)-1] {
		if m := writerMega.FindStringSubmatch(dir); m != nil {
			return "mp_rank_" + m[1] + "_" + m[2]
		}
	}
	return ""
}

// writers returns the ranks of c that count against ExpectedRanks: the
// layout's own list, or the writers its file names give.
func writers(c *Candidate) []string {
	if c.Ranks != nil {
		return c.Ranks
	}
	set := map[string]bool{}
	for _, f := range c.Step.Files {
		if w := writerOf(f.RelPath); w != "" {
			set[w] = true
		}
	}
	out := make([]string, 0, len(set))
	for w := range set {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// settleWhy says why a step waits out the settle window, for status.
func (e *engine) settleWhy(c *Candidate) string {
	switch {
	case e.opts.NoMarker:
		return "markers ignored"
	case c.Proof == ProofRanks && e.opts.ExpectedRanks == 0:
		return "set --expected-ranks to complete on close"
	case c.Proof == ProofNone:
		return "nothing proves the file set final"
	}
	return "not every file closed by its writer"
}

// warnStuck logs at warn, once per step and reason, a step whose files
// have not changed for a settle window but that still cannot complete:
// something only the operator can fix (expected ranks the names do not
// carry, a stale pointer, a marker that never comes on this node) must
// not be a silent wait.
func (e *engine) warnStuck(c *Candidate, why string) {
	key := "stuck\x00" + c.id() + "\x00" + why
	if e.warned[key] {
		return
	}
	e.warned[key] = true
	fields := []zap.Field{zap.String("step", c.id()), zap.String("reason", why), zap.Int("files", len(c.Step.Files))}
	if e.opts.ExpectedRanks > 0 {
		fields = append(fields, zap.Int("expected_ranks", e.opts.ExpectedRanks), zap.Strings("ranks_seen", writers(c)))
	}
	e.log.Warn("step unchanged for a settle window but not complete; it waits ("+stuckHint(c, why)+")", fields...)
}

// stuckHint says what the operator can do about a reason a step waits.
func stuckHint(c *Candidate, why string) string {
	switch {
	case c.Cut != "":
		return "NeMo removed (or is removing) a folder of the step after it was finished, or killed its -last save and rotated it away: what is left is not committed; a version committed before stays in the bucket, and the trainer's next save is committed as usual"
	case c.Stale:
		return "its files changed after the framework declared it complete; if the save was interrupted this version is torn and is not committed: the trainer's next complete save replaces it, and the bucket keeps the last complete version"
	case strings.HasPrefix(why, "files of "):
		return "--expected-ranks counts the ranks of this node that write files; check it, or leave it unset"
	case strings.HasPrefix(why, "marker: record: "):
		return "the step's files disagree with what its framework recorded (a shard torn, deleted, or rewritten after the save): it is not committed; the trainer's next complete save is, and a save run again in full replaces it"
	case strings.HasPrefix(why, "record: "):
		return "a file the framework's own record implies is not here: a rank still writing it (it lands soon), or one killed, or a cleanup's deletion; the step is not committed until the file is there, and the trainer's next complete save is"
	case strings.HasPrefix(why, "marker: "):
		return "the framework writes the marker last: if the save was interrupted the step is torn and is not committed; on a node that never holds global rank 0, see docs/many-nodes.md (--no-marker with --expected-ranks)"
	case strings.HasPrefix(why, "step folder "):
		return "ferry does not follow links: watch the link's target, or save into the watched directory"
	case strings.HasPrefix(why, "no latest-rank link"):
		return "Composer removes its links and then links the new checkpoint: if the save was killed between the two, the batch is not committed and the trainer's next complete save is; if the trainer no longer links its checkpoints (save_latest_filename=None), see docs/agent.md (Composer)"
	case strings.Contains(why, "latest-rank"):
		return "a rank's latest link names an earlier batch: remove the link of a rank that no longer saves"
	case strings.HasPrefix(why, "file ") && strings.Contains(why, "cut short"):
		return "a file of the step is torn (its writer was killed or is still writing): the step is not committed until the trainer saves it whole"
	case strings.HasPrefix(why, "name "):
		return "rename it: a manifest records names as UTF-8 without control characters or backslashes, so that a restore places them alike on any machine; nothing of the step is uploaded until then"
	case strings.HasPrefix(why, "optimizer states "):
		return "a rank wrote its model states but not yet its optimizer states"
	}
	return "see ferry status"
}

// Fresh evidence. A marker is something a framework writes after the
// bytes it vouches for; it proves them only if it really was written
// after them. A marker left from an earlier save (a job rolled back and
// saving the step again, killed halfway; a folder overwritten at every
// save) is older than the new bytes and proves nothing about them: the
// step waits until the framework writes its marker again, and a step
// whose marker never comes back is reported (warnStuck), never committed.
//
// "Written after" is read from modification times, both set by the same
// kernel (or, on a network filesystem, the same server) from the same
// clock. Times are compared with >=: the kernel stamps files from a
// coarse clock (a few milliseconds), so a marker written right after the
// last shard may carry the same time; a stale marker is one a save has
// since overtaken by a whole tick at least.

// staleMarker returns why the marker at markerPath does not vouch for the
// files of c that covers accepts (all when covers is nil): the newest such
// file was modified after the marker. "" when the marker is fresh or
// absent (absence is the layout's own rule).
func staleMarker(t *Tree, c *Candidate, markerPath string, covers func(File) bool) string {
	m, ok := t.Get(markerPath)
	if !ok {
		return ""
	}
	var newest *File
	for i := range c.Step.Files {
		f := &c.Step.Files[i]
		if f.RelPath == markerPath || covers != nil && !covers(*f) {
			continue
		}
		if newest == nil || f.ModTime.After(newest.ModTime) {
			newest = f
		}
	}
	if newest == nil || !newest.ModTime.After(m.ModTime) {
		return ""
	}
	return fmt.Sprintf("%s is older than %s, written %v after it: the step was saved again after its marker (a save still running, or one that was interrupted)",
		markerPath, newest.RelPath, newest.ModTime.Sub(m.ModTime).Round(time.Millisecond))
}

// requireFresh applies staleMarker to a finished candidate: a stale marker
// makes it unfinished, waiting for a fresh one.
func requireFresh(t *Tree, c *Candidate, markerPath string, covers func(File) bool) {
	if !c.Finished {
		return
	}
	if why := staleMarker(t, c, markerPath, covers); why != "" {
		c.Finished, c.Waiting, c.Stale = false, why, true
	}
	c.Step.Marker, c.Covers = markerPath, covers
}

// folderSlack absorbs the two inodes' timestamps of one rename coming from
// clocks of different granularity (Linux's multigrain timestamps stamp an
// inode finely only if someone looked at it since its last change).
const folderSlack = 20 * time.Millisecond

// requireSettledFolder applies, for a marker renamed into its folder last
// (DCP's .metadata), the same rule to the folder's entries: the folder's
// modification time moves when a file is created, deleted or renamed in
// it, so a folder changed after the marker arrived (its change time, which
// the rename sets) holds files the marker did not see, such as a cleanup
// deleting a shard right after a save.
func requireSettledFolder(t *Tree, c *Candidate, dir string, marker Entry) {
	d, ok := t.Get(dir)
	if !c.Finished || !ok || marker.ChangeTime.IsZero() || !d.ModTime.After(marker.ChangeTime.Add(folderSlack)) {
		return
	}
	c.Finished, c.Stale = false, true
	c.Waiting = fmt.Sprintf("files of %s were created or deleted %v after %s was written: the marker does not describe the folder as it is",
		dir, d.ModTime.Sub(marker.ChangeTime).Round(time.Millisecond), marker.Path)
}
