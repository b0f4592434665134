package detect

import (
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"
)

// singleLayout: trainers that keep one file per checkpoint in the root and
// rewrite or rotate it: the PyTorch ImageNet example's checkpoint.pth.tar
// (rewritten at every epoch) and model_best.pth.tar (copied from it),
// Lightning's epoch=E-step=S.ckpt top-k files and last.ckpt (rewritten, or
// a link), a plain torch.save(state, "checkpoint.pt"), in place or through
// os.replace.
//
//   - Step: the root's checkpoint files as they are now ([IsCheckpointFile]:
//     .pt, .pth, .pth.tar, .tar, .ckpt, .bin, .safetensors, .pkl, .npz,
//     .h5, .msgpack; links among them that point inside the root), one
//     version of the folder. Every version is its own counted step (the
//     agent numbers them 0, 1, 2... after the last committed one), named by
//     its files' paths, sizes and times, so a file rewritten makes a new
//     version, and restoring the latest step gives the files the trainer
//     resumes from. Unchanged files are deduplicated against the previous
//     version: a version costs the bytes that changed. Folders and other
//     files (logs, configs) are not part of it.
//   - A file cut short by its own format (a killed copy over
//     model_best.pth.tar) is left out of every version, with a warning,
//     until it is written whole: the other files stay durable.
//   - Marker: none. Each file is a whole checkpoint written in one go, so a
//     file whose writer closed it, that no process holds open for writing
//     and that is not cut short by its own format (selfcheck.go) is
//     complete (ProofClosed); the version completes without the settle
//     window once every file is. Where close-write detection is off or
//     unavailable (polling, network filesystems), the settle window
//     decides, and a file rewritten more often than that never settles.
//   - Consistency is per file: every file of a committed version is one
//     the trainer wrote whole, but two files are not from the same moment
//     unless the trainer wrote them so (model_best.pth.tar is copied after
//     checkpoint.pth.tar is saved: a version between the two holds the new
//     checkpoint with the previous best, which the trainer also had).
type singleLayout struct {
	log *zap.Logger
	// tornCache holds tornReason's verdicts (selfcheck.go); warned the
	// versions of files abandoned() warned about.
	tornCache tornCache
	warned    map[stat]bool
}

// abandonedAfter is how long a file cut short must stay unchanged, with no
// writer, before it is taken as abandoned by a killed writer.
const abandonedAfter = 2 * time.Second

// abandoned reports whether a file is cut short by its format, held open
// for writing by no process and unchanged for abandonedAfter: what a
// killed writer leaves, not what a writer at work has written so far. It
// warns once per version of a file it leaves out, and only then: a file
// read mid-write is not left out, it holds the version back.
func (l *singleLayout) abandoned(t *Tree, e *Entry) bool {
	if time.Since(e.ModTime) < abandonedAfter {
		return false
	}
	why, _ := l.tornCache.reason(t, e.Path, e.Size, e.ModTime)
	if why == "" {
		return false
	}
	if open, err := t.openForWriting(e.Path); err != nil || open {
		return false
	}
	key := stat{e.Path, e.Size, e.ModTime.UnixNano()}
	if !l.warned[key] && l.log != nil {
		if l.warned == nil || len(l.warned) > 1024 {
			l.warned = map[stat]bool{}
		}
		l.warned[key] = true
		l.log.Warn("checkpoint file left out of the folder's versions until it is written whole", zap.String("file", e.Path), zap.String("reason", why))
	}
	return true
}

var checkpointExt = regexp.MustCompile(`(?i)\.(?:pt|pth|tar|ckpt|bin|safetensors|pkl|npz|h5|msgpack)$`)

// IsCheckpointFile reports whether a file name in the root is one the
// single layout takes as a checkpoint.
func IsCheckpointFile(name string) bool {
	return !strings.HasPrefix(name, ".") && !IsTempName(name) && checkpointExt.MatchString(name)
}

// singlePrefix starts the ID of every version the single layout reports.
const singlePrefix = "single:"

func (*singleLayout) Name() string { return "single" }

func (*singleLayout) Recognize(t *Tree) bool {
	for _, e := range t.Children("") {
		if (e.IsRegular() || e.IsSymlink()) && IsCheckpointFile(e.Name()) {
			return true
		}
	}
	return false
}

func (l *singleLayout) Steps(t *Tree) []Candidate {
	c := Candidate{Step: Step{Number: -1}, Finished: true, Proof: ProofClosed}
	for _, e := range t.Children("") {
		name := e.Name()
		// An atomic writer's temporary file (checkpoint.pt.tmp, renamed
		// over checkpoint.pt when whole) is not part of any version and
		// holds none back: the file it replaces stays whole until the
		// rename, and one left by a killed save must not stop the next.
		switch {
		case !IsCheckpointFile(name) || e.IsDir():
		case e.Err != nil:
			c.Errs = append(c.Errs, e.Err)
		case e.IsRegular() && l.abandoned(t, &e):
			// A file a killed writer left cut short is no checkpoint: the
			// version is made of the whole ones (the trainer resumes from
			// checkpoint.pth.tar whatever became of model_best). One being
			// written stays in, and holds the version back.
		default:
			addEntry(&c, &e)
		}
	}
	if len(c.Step.Files) == 0 {
		return nil
	}
	c.ID = versionID(&c)
	return []Candidate{c}
}

// versionID names a version of the folder by its files' paths, sizes and
// times and its links' targets.
func versionID(c *Candidate) string {
	h := blake3.New()
	for _, f := range c.Step.Files {
		fmt.Fprintf(h, "f %s %d %d\n", f.RelPath, f.Size, f.ModTime.UnixNano())
	}
	for _, l := range c.Step.Symlinks {
		fmt.Fprintf(h, "l %s %s\n", l.RelPath, l.Target)
	}
	return singlePrefix + hex.EncodeToString(h.Sum(nil)[:8])
}

// superseded reports whether a vanished candidate was a version of a
// folder whose newer version replaced it, rather than a step deleted.
func superseded(id string) bool { return strings.HasPrefix(id, singlePrefix) }

// Superseded reports whether a Deleted event's step is a version of the
// single layout replaced by a newer one (a file rewritten), not a step the
// trainer deleted.
func Superseded(s *Step) bool { return s.Counted && superseded(s.ID) }
