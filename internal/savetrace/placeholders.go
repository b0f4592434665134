package savetrace

import (
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Vars are the values placeholders take in one save.
type Vars struct {
	Step int64
	Rank int
	// Prev are the steps saved before this one, the most recent first
	// ({prev1} is Prev[0]).
	Prev  []int64
	World int
	Epoch int
}

// placeholderRE matches a placeholder, with an optional zero-padded width
// ({step:07} or {step:07d}, as Python's format spec writes it); in text
// content only these are substituted, so JSON braces stay as written.
var placeholderRE = regexp.MustCompile(`\{([a-z]+[0-9]*)(?::0([1-9][0-9]?)d?)?\}`)

// Tmp is the placeholder of the scratch folder outside the watch dir
// (FORMAT.md): Expand leaves it in place for the caller to resolve.
const Tmp = "{tmp}"

// Expand substitutes the placeholders of s; ok is false when s names a
// step that does not exist ({prev3} after two saves): the op is skipped.
func Expand(s string, v Vars) (out string, ok bool) {
	ok = true
	out = placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := placeholderRE.FindStringSubmatch(m)
		name := sub[1]
		pad := func(n int64) string {
			w, _ := strconv.Atoi(sub[2])
			s := strconv.FormatInt(n, 10)
			for len(s) < w {
				s = "0" + s
			}
			return s
		}
		switch name {
		case "tmp":
			return m
		case "step":
			return pad(v.Step)
		case "rank":
			return strconv.Itoa(v.Rank)
		case "world":
			return strconv.Itoa(v.World)
		case "epoch":
			return strconv.Itoa(v.Epoch)
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(name, "prev"))
		if n < 1 || n > len(v.Prev) {
			ok = false
			return m
		}
		return pad(v.Prev[n-1])
	})
	return out, ok
}

func knownPlaceholder(name string) bool {
	switch name {
	case "step", "rank", "world", "epoch", "tmp":
		return true
	}
	if n, ok := strings.CutPrefix(name, "prev"); ok {
		i, err := strconv.Atoi(n)
		return err == nil && i >= 1 && n[0] != '0'
	}
	return false
}

// checkPlaceholders checks the placeholders of s: each known, {rank} only
// in an operation a rank runs; strict (paths) also refuses a brace that
// is not part of one.
func (p *parser) checkPlaceholders(s string, rank, strict bool) error {
	for i, m := range placeholderRE.FindAllStringSubmatchIndex(s, -1) {
		name, width := s[m[2]:m[3]], m[4] >= 0
		switch {
		case !knownPlaceholder(name):
			return p.errf("unknown placeholder {%s} (known: {step}, {rank}, {world}, {epoch}, {prev1}, {prev2}, ..., {tmp}; {step:07d} pads)", name)
		case name == "rank" && !rank:
			return p.errf("{rank} in an operation no rank runs")
		case width && name != "step" && !strings.HasPrefix(name, "prev"):
			return p.errf("{%s}: only {step} and {prevN} take a width", s[m[2]:m[1]-1])
		case name == "tmp" && (!strict || i > 0 || m[0] != 0 || !strings.HasPrefix(s[m[1]:], "/")):
			return p.errf("%q: {tmp} begins a path, as {tmp}/name (the scratch folder outside the watch dir)", s)
		}
	}
	if strict {
		if rest := placeholderRE.ReplaceAllString(s, ""); strings.ContainsAny(rest, "{}") {
			return p.errf("%q: a brace that is not a placeholder", s)
		}
	}
	return nil
}

// checkPath checks a path relative to the watch dir: no absolute path,
// no `..`, placeholders known.
func (p *parser) checkPath(s string, rank bool) error {
	if strings.HasPrefix(s, "/") || path.Clean(s) != s && s != "." {
		return p.errf("path %q: want a clean path relative to the watch dir (no leading /, no //, no trailing /, no ./)", s)
	}
	for _, part := range strings.Split(s, "/") {
		if part == ".." {
			return p.errf("path %q leaves the watch dir (..)", s)
		}
	}
	return p.checkPlaceholders(s, rank, true)
}

// checkTarget checks a link's target: relative (it may climb out of the
// link's folder with `..`), placeholders known.
func (p *parser) checkTarget(s string, rank bool) error {
	if strings.HasPrefix(s, "/") {
		return p.errf("link target %q: want a relative target (an absolute one names another machine's watch dir)", s)
	}
	return p.checkPlaceholders(s, rank, true)
}
