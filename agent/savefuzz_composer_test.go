package agent

import (
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/zeebo/blake3"
)

// Composer's save habits (composer/callbacks/checkpoint_saver.py, per-rank
// files as DeepSpeed runs and older releases write them): every rank
// torch.saves ep{E}-ba{B}-rank{R}.pt in place, then repoints its
// latest-rank{R}.pt (os.remove, then os.symlink to the relative name: for
// a moment the rank has no link), then rotates: with
// save_num_checkpoints_to_keep it removes its own oldest file of this
// process's saves. Ranks save and repoint independently, so one can be a
// save behind, and a rank can rotate an older step away while another is
// still writing.
//
// Where the job may die (docs/agent.md, the composer row: each rank's link
// vouches for its own file, written before the link): in the middle of any
// rank's file (torch.save's zip is then cut short, which holds the step
// whatever the links say), and between a rank's file and its link or
// between its link's removal and its creation, while another rank of a
// step that has links still names an older batch (it holds the step).
// Not where no evidence exists to tell a state the trainer never
// completed: a first save (no links yet: the settle window alone decides,
// and a rank that never starts is invisible), or the save of a batch whose
// files are already on disk (a rolled-back run with save_overwrite) killed
// between two ranks, which leaves one rank's new file beside another's old
// one, each under its own rank's link.

func composerFuzzLayout() fuzzLayout {
	return fuzzLayout{
		name: "composer", dir: func(int64) string { return "" },
		save: saveComposer, files: composerFiles,
		cleanup:    func(f *fz, n int64) { removeComposer(f, n) },
		removeStep: removeComposer,
		generated:  map[string]bool{},
	}
}

var composerFuzzName = regexp.MustCompile(`^ep\d+-ba(\d+)-rank\d+\.pt$`)

func composerName(n int64, rank int) string {
	return fmt.Sprintf("ep%d-ba%d-rank%d.pt", n/300, n, rank)
}

// composerFiles is batch n's rank files in the root.
func composerFiles(f *fz, n int64) fileState {
	out := fileState{}
	entries, _ := os.ReadDir(f.dir)
	for _, e := range entries {
		m := composerFuzzName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() || m[1] != strconv.FormatInt(n, 10) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(f.dir, e.Name()))
		if err != nil {
			panic(err)
		}
		sum := blake3.Sum256(data)
		out[e.Name()] = hex.EncodeToString(sum[:])
	}
	return out
}

func removeComposer(f *fz, n int64) {
	for name := range composerFiles(f, n) {
		f.remove(name)
	}
}

// saveComposer saves batch n on every rank.
func saveComposer(f *fz, n int64) {
	if f.saved == nil {
		f.saved = map[int][]int64{}
		if f.rng.Intn(2) == 0 {
			f.keep = 1 + f.rng.Intn(2)
			f.note("  save_num_checkpoints_to_keep=%d", f.keep)
		}
	}
	ranks := f.ranks()
	resave := len(composerFiles(f, n)) > 0
	if resave {
		f.saved = map[int][]int64{} // a rolled-back run: a new process
	}
	everyLink := true
	for r := range ranks {
		everyLink = everyLink && f.exists(fmt.Sprintf("latest-rank%d.pt", r))
	}
	f.composerKill(len(ranks), resave || !everyLink)
	rotated := map[int64]bool{} // step -> whole before the rotation began
	for i, r := range ranks {
		if i > 0 {
			f.sleep(f.gap())
		}
		f.file(composerName(n, r))
		link := fmt.Sprintf("latest-rank%d.pt", r)
		f.unlink(link)
		f.symlink(composerName(n, r), link)
		if f.dead {
			break
		}
		f.saved[r] = append(f.saved[r], n)
		for f.keep > 0 && len(f.saved[r]) > f.keep {
			b := f.saved[r][0]
			f.saved[r] = f.saved[r][1:]
			if _, ok := rotated[b]; !ok {
				rotated[b] = maps.Equal(composerFiles(f, b), lastOf(f.complete[strconv.FormatInt(b, 10)]))
			}
			f.note("  rank %d rotates batch %d away", r, b)
			f.remove(composerName(b, r))
		}
	}
	for b, whole := range rotated {
		key := strconv.FormatInt(b, 10)
		switch now := composerFiles(f, b); {
		case len(now) == 0 && whole:
			f.deleted[key] = true
		case !maps.Equal(now, lastOf(f.complete[key])):
			f.gone[key] = true
		}
	}
	if f.dead {
		f.saved = map[int][]int64{} // the job restarts: a new process
		return
	}
	f.completedState(strconv.FormatInt(n, 10), n, composerFiles(f, n))
}

// composerKill moves a drawn kill (f.crashAt) to an operation where the
// job may die (see the top of this file). Each rank's save is three
// operations: its file, its link's removal, its link's creation.
func (f *fz) composerKill(world int, writesOnly bool) {
	if f.crashAt < 0 {
		return
	}
	var at []int
	for i := range world {
		at = append(at, 3*i+1)
		if !writesOnly && i < world-1 {
			at = append(at, 3*i+2, 3*i+3)
		}
	}
	f.crashAt = at[f.rng.Intn(len(at))]
}

// unlink removes a rank's latest link (os.remove before os.symlink).
func (f *fz) unlink(rel string) {
	if f.dead || f.next() {
		return
	}
	f.note("  unlink %s", rel)
	if err := os.Remove(f.abs(rel)); err != nil && !os.IsNotExist(err) {
		panic(err)
	}
}

// symlink creates rel pointing at target (relative to rel's folder).
func (f *fz) symlink(target, rel string) {
	if f.dead || f.next() {
		return
	}
	f.note("  symlink %s -> %s", rel, target)
	if err := os.Symlink(target, f.abs(rel)); err != nil {
		panic(err)
	}
}
