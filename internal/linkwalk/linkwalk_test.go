package linkwalk

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

// tree is a root described as paths: "d/" a folder, "f" a file, "l->t" a
// link; anything else is missing.
func tree(entries ...string) Lookup {
	m := map[string]string{}
	for _, e := range entries {
		switch {
		case strings.Contains(e, "->"):
			name, target, _ := strings.Cut(e, "->")
			m[name] = target
		case strings.HasSuffix(e, "/"):
			m[strings.TrimSuffix(e, "/")] = "/"
		default:
			m[e] = ""
		}
	}
	return func(rel string) (Kind, string, error) {
		t, ok := m[rel]
		switch {
		case !ok:
			return Missing, "", nil
		case t == "/":
			return Dir, "", nil
		case t == "":
			return File, "", nil
		}
		return Link, t, nil
	}
}

func TestResolve(t *testing.T) {
	chain := []string{"d/"}
	for i := range MaxHops + 1 {
		chain = append(chain, fmt.Sprintf("d/l%d->l%d", i, i+1))
	}
	cases := []struct {
		name        string
		entries     []string
		start, rest string
		wantDir     bool
		want        string
		err         error
	}{
		{"plain", []string{"a/", "a/f"}, "", "a/f", false, "a/f", nil},
		{"missing parts resolve as created", nil, "", "x/y", true, "x/y", nil},
		{"relative link", []string{"a/", "b/", "a/l->../b"}, "", "a/l/f", false, "b/f", nil},
		{"from a folder", []string{"a/", "a/f"}, "a", "./f", false, "a/f", nil},
		{"dot dot inside", []string{"a/", "b/"}, "a", "../b", true, "b", nil},
		{"dot dot above the root", nil, "", "../x", false, "", ErrOutside},
		{"link above the root", []string{"a/", "a/l->../../etc"}, "", "a/l/passwd", false, "", ErrOutside},
		{"absolute inside", []string{"b/", "l->/root/b"}, "", "l/f", false, "b/f", nil},
		{"absolute through the alias", []string{"b/", "l->/alias/b"}, "", "l/f", false, "b/f", nil},
		{"absolute outside", []string{"l->/etc"}, "", "l/passwd", false, "", ErrOutside},
		{"absolute going back out", []string{"l->/root/../etc"}, "", "l", false, "", ErrOutside},
		{"absolute coming back in is walked, not cleaned", []string{"l->/elsewhere/x/../../root/b"}, "", "l", false, "", ErrOutside},
		{"absolute with a link inside it", []string{"a/", "a/x->../b", "b/", "l->/root/a/x/../f"}, "", "l", false, "f", nil},
		{"an absolute start", []string{"b/"}, "a", "/root/b/f", false, "b/f", nil},
		{"an absolute start outside", nil, "a", "/etc/passwd", false, "", ErrOutside},
		{"loop", []string{"a->b", "b->a"}, "", "a", false, "", ErrOutside},
		{"a chain of MaxHops links", chain[:MaxHops+1], "", "d/l0", false, fmt.Sprintf("d/l%d", MaxHops), nil},
		{"one link more", chain, "", "d/l0", false, "", ErrOutside},
		{"file in the middle", []string{"f"}, "", "f/x", false, "", ErrNotDir},
		{"file where a folder is wanted", []string{"f"}, "", "f", true, "", ErrNotDir},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := Walk{Lookup: tree(c.entries...), Under: func(abs string) (string, bool) { return UnderRoot(abs, "/root", "", "/alias") }}
			got, err := w.Resolve(c.start, c.rest, c.wantDir)
			if !errors.Is(err, c.err) || (c.err == nil && err != nil) {
				t.Fatalf("Resolve(%q, %q) error %v, want %v", c.start, c.rest, err, c.err)
			}
			if got != c.want {
				t.Fatalf("Resolve(%q, %q) = %q, want %q", c.start, c.rest, got, c.want)
			}
		})
	}
}

// A lookup's own error ends the walk as it is, and Visit sees each path
// looked up, in order.
func TestResolveLookupErrorAndVisit(t *testing.T) {
	var seen []string
	w := Walk{
		Lookup: func(rel string) (Kind, string, error) {
			if rel == "a/b" {
				return 0, "", fs.ErrNotExist
			}
			return Dir, "", nil
		},
		Under: func(string) (string, bool) { return "", false },
		Visit: func(rel string) { seen = append(seen, rel) },
	}
	if _, err := w.Resolve("", "a/b/c", false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error %v, want fs.ErrNotExist", err)
	}
	if strings.Join(seen, ",") != "a,a/b" {
		t.Fatalf("visited %q, want a then a/b", seen)
	}
}

func TestUnderRoot(t *testing.T) {
	for _, c := range []struct {
		target string
		want   string
		ok     bool
	}{
		{"/root", "", true},
		{"/root/", "", true},
		{"/root/a/b", "a/b", true},
		{"/root/a/../b", "a/../b", true},
		{"/root/../etc", "../etc", true},
		{"/rootx/a", "", false},
		{"/elsewhere/../root/a", "", false},
		{"/real/a", "a", true},
	} {
		got, ok := UnderRoot(c.target, "/root/", "/real")
		if got != c.want || ok != c.ok {
			t.Errorf("UnderRoot(%q) = %q, %v; want %q, %v", c.target, got, ok, c.want, c.ok)
		}
	}
}
