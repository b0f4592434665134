package detect

import (
	"regexp"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// flatLayout: no framework convention; every new file or folder in the root
// is a checkpoint.
//
//   - Steps: with Options.StepPattern, the entries of the root whose names
//     it matches, grouped by the number it reads (so "model-100.pt" and
//     "optim-100.pt" form step 100); entries it does not match are ignored.
//     Without a pattern, each entry is its own counted step (Step.Counted,
//     Number -1, ID "name:<entry>"), reported in order of modification
//     time; the caller numbers them, and identifies them by Root and Files
//     across restarts since such numbers are not stable.
//   - Root: the folder when the step is one folder, else "".
//   - Marker: none; the settle window alone decides. Names starting with "."
//     are ignored; temporary names hold back the step they would belong to.
//   - Files: the file, or everything in the folder. Ranks by RankOf.
//   - Pointer: none.
type flatLayout struct {
	pattern *regexp.Regexp
	log     *zap.Logger
}

func (*flatLayout) Name() string { return "flat" }

func (l *flatLayout) stepFolder(name string) bool {
	_, _, ok := l.identify(name)
	return ok && !strings.HasPrefix(name, ".") && !IsTempName(name)
}

func (*flatLayout) Recognize(t *Tree) bool { return len(t.Children("")) > 0 }

func (l *flatLayout) Steps(t *Tree) []Candidate {
	byID := map[string]*Candidate{}
	entries := map[string]int{}
	var order []string
	for _, e := range t.Children("") {
		name := e.Name()
		if strings.HasPrefix(name, ".") || e.IsSymlink() {
			continue
		}
		temp := IsTempName(name)
		if temp {
			name = stripTemp(name)
		}
		id, number, ok := l.identify(name)
		if !ok {
			continue
		}
		c := byID[id]
		if c == nil {
			c = &Candidate{ID: id, Step: Step{Number: number}, Finished: true}
			byID[id] = c
			order = append(order, id)
		}
		switch {
		case temp:
			c.Temps = append(c.Temps, e.Path)
			continue
		case e.IsDir():
			sub := folderStep(t, e.Path, number)
			c.Step.Files = append(c.Step.Files, sub.Step.Files...)
			c.Step.Symlinks = append(c.Step.Symlinks, sub.Step.Symlinks...)
			c.Temps = append(c.Temps, sub.Temps...)
			c.Errs = append(c.Errs, sub.Errs...)
			c.Step.Root = e.Path
		case e.Err != nil:
			c.Errs = append(c.Errs, e.Err)
		default:
			addEntry(c, &e)
		}
		entries[id]++
	}
	out := make([]Candidate, 0, len(order))
	for _, id := range order {
		c := byID[id]
		if entries[id] != 1 {
			c.Step.Root = ""
		}
		out = append(out, *c)
	}
	return out
}

// identify names the step an entry belongs to: by the pattern's number, or
// by the entry's own name in counter mode (number -1, assigned on report).
func (l *flatLayout) identify(name string) (id string, number int64, ok bool) {
	if l.pattern == nil {
		return "name:" + name, -1, true
	}
	n, ok := stepFromName(l.pattern, name)
	if !ok {
		return "", 0, false
	}
	return strconv.FormatInt(n, 10), n, true
}
