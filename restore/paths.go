package restore

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/manifest"
)

// PathFilter selects the manifest paths a restore writes (restore
// --include and --exclude). A path is selected when it matches an include
// pattern, or there are none, and no exclude pattern.
//
// Patterns are slash-separated and matched against the manifest's paths.
// Within one path segment `*` matches any run of characters, `?` one, and
// `[...]` a class, as path.Match; a segment `**` matches any number of
// segments, none included. A pattern without a slash matches a name at any
// depth (`*.safetensors` is `**/*.safetensors`), as in .gitignore. A
// pattern that matches a folder selects everything below it
// (`global_step100` selects `global_step100/mp_rank_00_model_states.pt`).
type PathFilter struct {
	include, exclude []pattern
}

// pattern is one compiled pattern: its text and its segments.
type pattern struct {
	text string
	segs []string
}

// NewPathFilter compiles include and exclude patterns, or returns an error
// naming the first bad one.
func NewPathFilter(include, exclude []string) (*PathFilter, error) {
	f := &PathFilter{}
	for _, set := range []struct {
		flag string
		in   []string
		out  *[]pattern
	}{{"--include", include, &f.include}, {"--exclude", exclude, &f.exclude}} {
		for _, text := range set.in {
			p, err := compilePattern(text)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", set.flag, text, err)
			}
			*set.out = append(*set.out, p)
		}
	}
	return f, nil
}

func compilePattern(text string) (pattern, error) {
	t := strings.TrimSuffix(strings.TrimPrefix(text, "/"), "/")
	if t == "" {
		return pattern{}, errors.New("empty pattern: want a path or a glob such as global_step100/** or *.safetensors")
	}
	if !strings.Contains(t, "/") {
		t = "**/" + t
	}
	segs := strings.Split(t, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return pattern{}, fmt.Errorf("segment %q: want names or globs between slashes", s)
		}
		if _, err := path.Match(s, ""); err != nil {
			return pattern{}, fmt.Errorf("segment %q: %w", s, err)
		}
	}
	return pattern{text: text, segs: segs}, nil
}

// Selects reports whether the filter selects the manifest path p.
func (f *PathFilter) Selects(p string) bool {
	if f == nil {
		return true
	}
	segs := strings.Split(p, "/")
	if len(f.include) > 0 && matchAny(f.include, segs) == nil {
		return false
	}
	return matchAny(f.exclude, segs) == nil
}

func matchAny(ps []pattern, segs []string) *pattern {
	for i := range ps {
		if matchSegs(ps[i].segs, segs) {
			return &ps[i]
		}
	}
	return nil
}

// matchSegs reports whether the pattern matches the path or a folder above
// it: the pattern's segments run out with path segments left or none.
func matchSegs(pat, segs []string) bool {
	if len(pat) == 0 {
		return true
	}
	if pat[0] == "**" {
		for k := 0; k <= len(segs); k++ {
			if matchSegs(pat[1:], segs[k:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], segs[0])
	return ok && matchSegs(pat[1:], segs[1:])
}

// ErrNoMatch is wrapped by a restore whose include pattern matches none of
// the step's files.
var ErrNoMatch = errors.New("matches none of the step's files")

// selection returns which files and links of m the restore writes: the
// ranks (nil: all) and opts.Paths agree on a file; a link is written when
// its target (lexically, from the link's folder) is a written file or a
// folder holding one, and no exclude pattern matches the link itself (a
// `latest` link comes with the step it names). Without Paths every link
// is.
func selection(m *manifest.Manifest, opts Options, ranks func(*int) bool) (func(manifest.File) bool, func(manifest.Symlink) bool, error) {
	f := opts.Paths
	if f == nil {
		if ranks == nil {
			return nil, nil, nil
		}
		return func(fl manifest.File) bool { return fl.Rank == nil || ranks(fl.Rank) }, nil, nil
	}
	kept := map[string]bool{}     // selected file paths and the folders above them
	selected := map[string]bool{} // selected file paths
	used := make([]bool, len(f.include))
	for _, fl := range m.Files {
		segs := strings.Split(fl.Path, "/")
		for i := range f.include {
			used[i] = used[i] || matchSegs(f.include[i].segs, segs)
		}
		if f.Selects(fl.Path) && (ranks == nil || fl.Rank == nil || ranks(fl.Rank)) {
			selected[fl.Path] = true
			for d := fl.Path; d != "."; d = path.Dir(d) {
				kept[d] = true
			}
		}
	}
	if !opts.AllowNoMatch {
		for i, u := range used {
			if !u {
				return nil, nil, fmt.Errorf("--include %q %w (%d files; ferry show lists them, --allow-empty restores what the others select)",
					f.include[i].text, ErrNoMatch, len(m.Files))
			}
		}
	}
	want := func(fl manifest.File) bool { return selected[fl.Path] }
	wantLink := func(l manifest.Symlink) bool {
		if matchAny(f.exclude, strings.Split(l.Path, "/")) != nil {
			return false
		}
		if kept[path.Join(path.Dir(l.Path), l.Target)] {
			return true
		}
		opts.Logger.Info("left out: a link whose target is not restored", zap.String("link", l.Path), zap.String("target", l.Target))
		return false
	}
	return want, wantLink, nil
}
