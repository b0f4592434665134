package detect

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// composerLayout: MosaicML Composer's save_folder with the default names.
//
//   - Single-file steps: "ep{E}-ba{B}-rank{R}.pt" files in the root
//     (optionally compressed: ".pt.gz", ".pt.lz4", ...); every file with the
//     same B forms step B, Root "", rank R each.
//   - Sharded steps: folders "ep{E}-ba{B}" in the root holding
//     "__{R}_0.distcp" files and a ".metadata" written last; step B.
//   - Marker: sharded, ".metadata" (ProofMarker). Single-file checkpoints
//     have none: each rank torch.saves its file in place and then points
//     its "latest-rank{R}.pt" symlink at it. So any rank whose latest-rank
//     link names an earlier batch is still saving and holds the step back,
//     whether or not its file has appeared yet; a rank whose link names
//     the batch has finished its file, if ferry saw its link naming the
//     batch after the file's last write (declare.go's keepPointed and
//     linkedWhileWatched: a rank's part of a batch rotated away after the
//     links declared it holds the step; a rolled-back run repointing the
//     links at an earlier batch takes nothing from it). With
//     Options.ExpectedRanks that many
//     finished ranks prove the step (ProofRanks); without links (the first
//     save, or latest disabled) only the settle window decides. Once a
//     link was seen (Options.Linked across restarts), no link at all
//     holds every step the links did not declare (composerUnlinked). A link
//     naming a file of the batch that is not there holds the step
//     (linkedMissing); a sharded folder's .metadata is DCP's record.
//   - Pointers: single-file steps get Symlinks "latest-rank{R}.pt" ->
//     "ep{E}-ba{B}-rank{R}.pt" for each rank, built rather than read: the
//     live link is repointed at every save and may already name a later
//     step. Sharded steps record the live links in the root that point at
//     their folder, as every layout does.
type composerLayout struct {
	// rec reads sharded folders' .metadata (dcprecord.go).
	rec dcpRecords
	// linked is set once a latest-rank link was seen in the root, or
	// Options.Linked said one was before a restart (composerUnlinked).
	linked *atomic.Bool
}

var (
	composerFile   = regexp.MustCompile(`^ep(\d+)-ba(\d+)-rank(\d+)\.pt(?:\.(?:gz|bz2|lz4|lzma|xz|zst|tar))?$`)
	composerFolder = regexp.MustCompile(`^ep(\d+)-ba(\d+)(?:-rank\d+(?:\.pt)?)?$`)
	composerLatest = regexp.MustCompile(`^latest-rank(\d+)\.pt$`)
)

func (*composerLayout) Name() string { return "composer" }

func (*composerLayout) stepFolder(name string) bool { return composerFolder.MatchString(name) }

func (*composerLayout) Recognize(t *Tree) bool {
	for _, e := range t.Children("") {
		if e.IsRegular() && composerFile.MatchString(e.Name()) ||
			e.IsDir() && composerFolder.MatchString(e.Name()) ||
			e.IsSymlink() && composerLatest.MatchString(e.Name()) {
			return true
		}
	}
	return false
}

func (l *composerLayout) Steps(t *Tree) []Candidate {
	single := map[int64]*Candidate{}
	latest := map[int]latestLink{} // rank -> what its latest link names
	var folders []Candidate
	for _, e := range t.Children("") {
		name := e.Name()
		switch {
		case e.IsSymlink():
			if m := composerLatest.FindStringSubmatch(name); m != nil {
				l.linked.Store(true)
				if b, ok := composerBatch(path.Base(e.Target)); ok {
					r, _ := strconv.Atoi(m[1])
					latest[r] = latestLink{batch: b, path: e.Path, target: path.Base(e.Target), modTime: e.ModTime}
				}
			}
		case e.IsDir():
			if m := composerFolder.FindStringSubmatch(name); m != nil {
				if b, ok := parseStep(m[2]); ok {
					c := folderStep(t, e.Path, b)
					if md, ok := t.Get(e.Path + "/" + dcpMetadata); ok && md.IsRegular() {
						c.Finished, c.Proof = true, ProofMarker
						requireFresh(t, &c, md.Path, nil)
						if rec, ok := l.rec.record(t, md); ok {
							l.rec.requireRecorded(t, &c, e.Path, md, rec)
						}
					} else {
						c.Waiting = "no " + dcpMetadata
					}
					folders = append(folders, c)
				}
			}
		case IsTempName(name):
			if b, ok := composerBatch(stripTemp(name)); ok {
				composerStep(single, b).Temps = append(composerStep(single, b).Temps, e.Path)
			}
		case e.IsRegular() || e.Err != nil:
			if m := composerFile.FindStringSubmatch(name); m != nil {
				if b, ok := parseStep(m[2]); ok {
					c := composerStep(single, b)
					if e.Err != nil {
						c.Errs = append(c.Errs, e.Err)
					}
					addEntry(c, &e)
				}
			}
		}
	}
	linked := l.linked.Load()
	for i := range folders {
		composerFolderLinked(&folders[i], latest, linked)
	}
	out := folders
	for b, c := range single {
		composerSingle(c, b, latest, linked)
		out = append(out, *c)
	}
	return out
}

// composerUnlinked holds a finished step of batch b while no latest-rank
// link is in the root at all but the folder's checkpoints are linked
// (a link was seen before, in this run or, through the agent's journal,
// an earlier one): Composer v0.32.1 repoints a link by os.remove and then
// os.symlink (CheckpointSaver._save_checkpoint, after the save and its
// barrier), so a save killed between the two leaves no link, and a
// checkpoint no link names is one whose save never returned
// (testdata/saveorders/composer.trace, composer-sharded.trace). A folder
// never linked (save_latest_filename=None) keeps the marker's and the
// settle window's rules.
func composerUnlinked(c *Candidate, b int64, latest map[int]latestLink, linked bool) bool {
	if !c.Finished || !linked || len(latest) > 0 || c.Held != "" {
		return false
	}
	c.Held = fmt.Sprintf("no latest-rank link names batch %d or a later one, and this folder's checkpoints are linked: "+
		"Composer removes its links and then links the new checkpoint, so the save of this batch has not returned", b)
	// A step the links declared before they were removed keeps its
	// declaration (keepPointed, folderLinked), as when they name an
	// earlier batch.
	c.PointedBack = true
	return true
}

// composerFolderLinked holds a sharded folder whose batch no rank's
// latest link names yet while a link names an earlier one: Composer
// v0.32.1 repoints global rank 0's latest-rank0.pt at the folder after
// the DCP save and its barriers (testdata/saveorders/composer-sharded.trace,
// CheckpointSaver._save_checkpoint), and autoresume takes the batch from
// it; until then the save has not returned. A rolled-back run pointing
// the links back is a pointer moving back (PointedBack), as for files;
// so are links all removed by the next save (composerUnlinked). The
// watcher checks the links against what it saw (Candidate.Linked,
// declare.go's folderLinked). Without any link ever seen (the first
// save, or latest_filename=None) .metadata alone decides.
func composerFolderLinked(c *Candidate, latest map[int]latestLink, linked bool) {
	if composerUnlinked(c, c.Step.Number, latest, linked) {
		c.Linked = true
		return
	}
	if !c.Finished || len(latest) == 0 {
		return
	}
	c.Linked = true
	var behind []string
	for _, r := range slices.Sorted(maps.Keys(latest)) {
		l := latest[r]
		if l.batch >= c.Step.Number {
			return
		}
		behind = append(behind, l.path+" still names batch "+strconv.FormatInt(l.batch, 10))
	}
	c.Held, c.PointedBack = strings.Join(behind, "; "), true
}

// latestLink is a rank's latest-rank{R}.pt link: the batch it names and
// when it was last repointed.
type latestLink struct {
	batch   int64
	path    string
	target  string // the base name the link points at
	modTime time.Time
}

// composerSingle applies the latest-rank links to a single-file step of
// batch b: any rank whose link names an earlier batch is still saving b
// (ranks save and repoint their links independently, so one can be a save
// behind, with or without a file in b yet); a rank whose link names b or
// later has finished its file. Links are built for the step's ranks.
func composerSingle(c *Candidate, b int64, latest map[int]latestLink, linked bool) {
	c.Finished = true
	unlinked := composerUnlinked(c, b, latest, linked)
	var behind []string
	var ranks []int
	for r := range latest {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		if lb := latest[r].batch; lb < b {
			behind = append(behind, "latest-rank"+strconv.Itoa(r)+".pt still names batch "+strconv.FormatInt(lb, 10))
		}
	}
	for _, f := range c.Step.Files {
		// A link vouches only for a file written before it was repointed:
		// a rank that saved the batch again (a rolled-back run) has not
		// finished until it repoints its link once more.
		if l, ok := latest[rankOr(f.Rank)]; ok && f.Rank != nil && l.batch >= b && f.ModTime.After(l.modTime) {
			behind = append(behind, l.path+" is older than "+f.RelPath+": the rank saved it again and has not repointed its link yet")
			c.Stale = true
		}
	}
	if len(behind) > 0 {
		c.Held, c.PointedBack = strings.Join(behind, "; "), !c.Stale
	} else if missing := linkedMissing(c, b, latest, ranks); missing != "" && !unlinked {
		c.Held = missing
	}
	done := composerLinks(c, b, latest)
	switch {
	case unlinked:
		// Held until a link names it, unless the links declared it
		// before they were removed (keepPointed): then the ranks are
		// the writers its names give.
		c.Proof = ProofRanks
	case len(latest) > 0:
		// A rank's link, repointed after its save, is its own marker.
		c.Ranks, c.Proof = done, ProofRanks
	}
}

// composerLinks builds the step's latest-rank links, one per rank file,
// and returns the ranks whose live link names batch b or a later one and
// was repointed after the rank's file.
func composerLinks(c *Candidate, b int64, latest map[int]latestLink) []string {
	done := []string{}
	for _, f := range c.Step.Files {
		if f.Rank == nil {
			continue
		}
		if l, ok := latest[*f.Rank]; ok && l.batch >= b && !f.ModTime.After(l.modTime) {
			done = append(done, "rank "+strconv.Itoa(*f.Rank))
		}
		c.Step.Symlinks = append(c.Step.Symlinks, Symlink{
			RelPath: "latest-rank" + strconv.Itoa(*f.Rank) + ".pt",
			Target:  f.RelPath,
		})
	}
	return done
}

// linkedMissing returns why a rank's link names a file of batch b that
// is not in the step, or "". Composer v0.32.1 (composer/callbacks/
// checkpoint_saver.py CheckpointSaver._save_checkpoint) repoints a rank's
// latest link (os.remove, then os.symlink) only after
// checkpoint.save_checkpoint returned, and _save_checkpoint (composer/
// utils/checkpoint.py) returns only after torch.save and dist.barrier():
// a link naming a file says that file was whole.
func linkedMissing(c *Candidate, b int64, latest map[int]latestLink, ranks []int) string {
	have := map[string]bool{}
	for _, f := range c.Step.Files {
		have[path.Base(f.RelPath)] = true
	}
	for _, r := range ranks {
		if l := latest[r]; l.batch == b && !have[l.target] {
			return fmt.Sprintf("record: %s names %s, which is not here (expected: the file its rank saved before repointing the link; found: nothing)", l.path, l.target)
		}
	}
	return ""
}

func rankOr(r *int) int {
	if r == nil {
		return -1
	}
	return *r
}

func composerStep(m map[int64]*Candidate, b int64) *Candidate {
	c := m[b]
	if c == nil {
		c = &Candidate{Step: Step{Number: b}}
		m[b] = c
	}
	return c
}

// composerBatch returns the batch of a Composer checkpoint file or folder
// name.
func composerBatch(name string) (int64, bool) {
	m := composerFile.FindStringSubmatch(name)
	if m == nil {
		m = composerFolder.FindStringSubmatch(name)
	}
	if m == nil {
		return 0, false
	}
	return parseStep(m[2])
}

// stripTemp removes one temporary suffix from a name.
func stripTemp(name string) string {
	if i := strings.Index(name, orbaxTemp); i > 0 {
		return name[:i]
	}
	for _, suf := range []string{".tmp", ".temp", ".partial", "~"} {
		if s, ok := strings.CutSuffix(name, suf); ok {
			return s
		}
	}
	return name
}
