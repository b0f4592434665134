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

// placeholderRE matches a placeholder; in text content only these are
// substituted, so JSON braces stay as written.
var placeholderRE = regexp.MustCompile(`\{([a-z]+[0-9]*)\}`)

// Expand substitutes the placeholders of s; ok is false when s names a
// step that does not exist ({prev3} after two saves): the op is skipped.
func Expand(s string, v Vars) (out string, ok bool) {
	ok = true
	out = placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		switch name {
		case "step":
			return strconv.FormatInt(v.Step, 10)
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
		return strconv.FormatInt(v.Prev[n-1], 10)
	})
	return out, ok
}

func knownPlaceholder(name string) bool {
	switch name {
	case "step", "rank", "world", "epoch":
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
	for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
		switch {
		case !knownPlaceholder(m[1]):
			return p.errf("unknown placeholder {%s} (known: {step}, {rank}, {world}, {epoch}, {prev1}, {prev2}, ...)", m[1])
		case m[1] == "rank" && !rank:
			return p.errf("{rank} in an operation no rank runs")
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
