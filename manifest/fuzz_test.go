package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// corpusDir holds hand-written manifests, valid and hostile: the seeds of
// FuzzDecode, and TestDecodeCorpus checks what each must give.
const corpusDir = "testdata/manifests"

// corpusWant maps each corpus file to what DecodeBytes must answer: "" to
// accept it, else a text the error must contain (the field it names).
var corpusWant = map[string]string{
	"valid-1.0.json":                     "",
	"valid-3.0-packed.json":              "",
	"reject-pack-past-end.json":          "files[1]: offset 11",
	"reject-pack-in-format-1.json":       "packs need format 3",
	"valid-1.1-nodes.json":               "",
	"valid-empty.json":                   "",
	"valid-future-minor.json":            "",
	"reject-absolute-path.json":          "files[0].path",
	"reject-dotdot-path.json":            "files[0].path",
	"reject-duplicate-path.json":         "files[1].path",
	"reject-link-absolute.json":          "symlinks[0].target",
	"reject-link-escape.json":            "symlinks[0].target",
	"reject-below-link.json":             "files[0].path",
	"reject-negative-size.json":          "files[0].size",
	"reject-absurd-size.json":            "files[0].size",
	"reject-size-overflow.json":          "files.size",
	"reject-key-outside-prefix.json":     "files[0].key",
	"reject-key-escaping-prefix.json":    "files[0].key",
	"reject-bad-hash.json":               "files[0].blake3",
	"reject-format-4.json":               "field format",
	"reject-sharded-without-shards.json": "field shards",
	"reject-format-missing.json":         "field format",
	"reject-format-number.json":          "not valid JSON",
	"reject-step-negative.json":          "field step",
	"reject-created-missing.json":        "field created",
	"reject-part-size-tiny.json":         "files[0].part_size",
	"reject-rank-negative.json":          "files[0].rank",
	"reject-nodes-negative.json":         "field nodes",
	"reject-nul-path.json":               "files[0].path",
	"reject-not-object.json":             "not valid JSON",
	"reject-trailing-garbage.json":       "not valid JSON",
	"reject-files-wrong-type.json":       "not valid JSON",
	"valid-1.4-mtime.json":               "",
	"reject-mtime-not-rfc3339.json":      "files[0].mtime",
	"reject-mtime-before-1970.json":      "files[0].mtime",
	"reject-mtime-past-int64.json":       "files[0].mtime",
	"reject-mtime-number.json":           "files.mtime",
}

func readCorpus(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(corpusDir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no corpus in %s: %v", corpusDir, err)
	}
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = data
	}
	return out
}

// TestDecodeCorpus runs every hand-written manifest through DecodeBytes:
// the valid ones decode, each hostile one fails naming its field.
func TestDecodeCorpus(t *testing.T) {
	corpus := readCorpus(t)
	for name := range corpusWant {
		if _, ok := corpus[name]; !ok {
			t.Errorf("corpus file %s is missing", name)
		}
	}
	for name, data := range corpus {
		want, ok := corpusWant[name]
		if !ok {
			t.Errorf("%s: add it to corpusWant", name)
			continue
		}
		m, err := DecodeBytes(data, "run")
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: rejected: %v", name, err)
		case want == "":
			checkRoundTrip(t, m)
		case err == nil:
			t.Errorf("%s: accepted, want an error naming %s", name, want)
		case !strings.Contains(err.Error(), want):
			t.Errorf("%s: error %q does not name %s", name, err, want)
		}
	}
}

// FuzzDecode feeds DecodeBytes arbitrary bytes: it must never panic, and
// whatever it accepts must pass Validate and survive Encode and DecodeBytes
// unchanged. Run it with `make fuzz`.
func FuzzDecode(f *testing.F) {
	for _, data := range readCorpus(f) {
		f.Add(data)
	}
	enc, err := Encode(valid())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add([]byte(`{"format":"1.0","files":[[[[[[[[]]]]]]]]}`))
	f.Add([]byte(`{"format":"1.0","step":1,"created":"2026-01-01T00:00:00Z","files":[{},{},{}]}`))
	f.Add([]byte(`{"FORMAT":"1.0","Step":1,"CREATED":"2026-01-01T00:00:00Z","Files":null,"format":"1.5"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeBytes(data, "run")
		if err != nil {
			if m != nil {
				t.Fatalf("error %v with a manifest", err)
			}
			return
		}
		if err := Validate(m, "run"); err != nil {
			t.Fatalf("DecodeBytes accepted what Validate rejects: %v", err)
		}
		checkRoundTrip(t, m)
	})
}

// checkRoundTrip encodes m and decodes it again: the result must be m.
func checkRoundTrip(t *testing.T, m *Manifest) {
	t.Helper()
	enc, err := Encode(m)
	if err != nil {
		t.Fatalf("Encode of a decoded manifest: %v", err)
	}
	again, err := DecodeBytes(enc, "run")
	if err != nil {
		t.Fatalf("decode of the re-encoded manifest: %v\n%s", err, enc)
	}
	if !SameContent(m, again) || m.Format != again.Format || !m.Created.Equal(again.Created) || m.Nodes != again.Nodes ||
		!sameElements(m.Files, again.Files) || !sameElements(m.Symlinks, again.Symlinks) {
		t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, again)
	}
}

// sameElements is reflect.DeepEqual over the elements: an empty list and a
// missing one (null, or left out by omitempty) are the same.
func sameElements[E any](a, b []E) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// TestDecodeBoundsAllocation feeds DecodeBytes inputs built to make a
// decoder allocate far more than their size: it must refuse them without
// allocating much more than the input.
func TestDecodeBoundsAllocation(t *testing.T) {
	repeat := func(head, el, tail string, size int) []byte {
		n := (size - len(head) - len(tail)) / len(el)
		return slices.Concat([]byte(head), bytes.Repeat([]byte(el), n), []byte(tail))
	}
	const head = `{"format":"1.0","step":1,"created":"2026-01-01T00:00:00Z","files":[`
	cases := []struct {
		name, want string
		data       func() []byte
	}{
		// Each "{}," would become a File of about 70 bytes: 22 million
		// of them took 8 GiB before the entries were counted first.
		{"64 MiB of empty entries", "field files: more than", func() []byte { return repeat(head, "{},", "{}]}", MaxManifestSize) }},
		{"64 MiB of wrong-typed entries", "field files: more than", func() []byte { return repeat(head, "0,", "0]}", MaxManifestSize) }},
		{"64 MiB of null symlinks", "field symlinks: more than", func() []byte { return repeat(`{"format":"1.0","symlinks":[`, "null,", "null]}", MaxManifestSize) }},
		{"64 MiB in an unknown field", "field junk: more than", func() []byte { return repeat(`{"format":"1.0","junk":[`, "1,", "1]}", MaxManifestSize) }},
		{"1 MiB of nested arrays", "nested", func() []byte { return repeat(`{"format":"1.0","files":`, "[", "", 1<<20) }},
		{"1 MiB of nested objects", "not valid JSON", func() []byte { return repeat(`{"format":"1.0","x":`, `{"a":`, "", 1<<20) }},
		{"1 MiB long path", "files[0].path", func() []byte { return []byte(head + `{"path":"` + strings.Repeat("a/", 1<<19) + `x"}]}`) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := c.data()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m, err := DecodeBytes(data, "run")
			runtime.ReadMemStats(&after)
			if err == nil || m != nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes in, %d bytes allocated: %v", len(data), alloc, err)
			if limit := 8*uint64(len(data)) + 1<<20; alloc > limit {
				t.Errorf("allocated %d bytes for %d bytes of input, want at most %d", alloc, len(data), limit)
			}
		})
	}
}
