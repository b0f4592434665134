package manifest

import (
	"strings"
	"testing"
	"time"
)

var hashA = strings.Repeat("a", 64)

func valid() *Manifest {
	r0 := 0
	return &Manifest{
		Format:  FormatVersion,
		Step:    1000,
		Created: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
		Files: []File{
			{Path: "ep0-ba1000-rank0.pt", Size: 10, BLAKE3: hashA, Key: "run/data/000000001000/x/ep0-ba1000-rank0.pt", Rank: &r0},
			{Path: "sub/big.bin", Size: 20 << 20, BLAKE3: hashA, Key: "run/data/000000001000/x/sub/big.bin", PartSize: 8 << 20,
				MTime: TimeOf(time.Date(2026, 12, 1, 23, 59, 58, 123456789, time.UTC))},
		},
		Symlinks: []Symlink{{Path: "latest-rank0.pt", Target: "ep0-ba1000-rank0.pt"}},
	}
}

func TestValidateAccepts(t *testing.T) {
	if err := Validate(valid(), "run"); err != nil {
		t.Fatal(err)
	}
	data, err := Encode(valid())
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeBytes(data, "run")
	if err != nil {
		t.Fatalf("decode what Encode wrote: %v", err)
	}
	if !SameContent(m, valid()) || *m.Files[0].Rank != 0 || m.Files[1].PartSize != 8<<20 {
		t.Fatalf("round trip changed the manifest: %+v", m)
	}
}

func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name  string
		mod   func(m *Manifest)
		field string
	}{
		{"absolute path", func(m *Manifest) { m.Files[0].Path = "/etc/passwd" }, "files[0].path"},
		{"dot-dot", func(m *Manifest) { m.Files[0].Path = "a/../../x" }, "files[0].path"},
		{"leading dot-dot", func(m *Manifest) { m.Files[1].Path = "../x" }, "files[1].path"},
		{"unclean", func(m *Manifest) { m.Files[0].Path = "a//b" }, "files[0].path"},
		{"dot element", func(m *Manifest) { m.Files[0].Path = "./a" }, "files[0].path"},
		{"backslash", func(m *Manifest) { m.Files[0].Path = `a\..\b` }, "files[0].path"},
		{"control char", func(m *Manifest) { m.Files[0].Path = "a\nb" }, "files[0].path"},
		{"empty path", func(m *Manifest) { m.Files[0].Path = "" }, "files[0].path"},
		{"duplicate", func(m *Manifest) { m.Files[1].Path = m.Files[0].Path }, "files[1].path"},
		{"duplicate with link", func(m *Manifest) { m.Symlinks[0].Path = m.Files[0].Path }, "symlinks[0].path"},
		{"file below file", func(m *Manifest) { m.Files[1].Path = m.Files[0].Path + "/x" }, "files[1].path"},
		{"file below link", func(m *Manifest) { m.Files[1].Path = "latest-rank0.pt/x" }, "path"},
		{"negative size", func(m *Manifest) { m.Files[0].Size = -1 }, "files[0].size"},
		{"absurd size", func(m *Manifest) { m.Files[0].Size = 1 << 50 }, "files[0].size"},
		{"short hash", func(m *Manifest) { m.Files[0].BLAKE3 = "abc" }, "files[0].blake3"},
		{"upper-case hash", func(m *Manifest) { m.Files[0].BLAKE3 = strings.Repeat("A", 64) }, "files[0].blake3"},
		{"key outside prefix", func(m *Manifest) { m.Files[0].Key = "other/data/x" }, "files[0].key"},
		{"key escaping prefix", func(m *Manifest) { m.Files[0].Key = "run/data/../../other" }, "files[0].key"},
		{"part size too small", func(m *Manifest) { m.Files[1].PartSize = 1 << 20 }, "files[1].part_size"},
		{"too many parts", func(m *Manifest) { m.Files[1].Size = 1 << 40; m.Files[1].PartSize = 5 << 20 }, "files[1].part_size"},
		{"single put too large", func(m *Manifest) { m.Files[1].Size = 6 << 30; m.Files[1].PartSize = 0 }, "files[1].part_size"},
		{"negative rank", func(m *Manifest) { r := -1; m.Files[0].Rank = &r }, "files[0].rank"},
		{"absolute link", func(m *Manifest) { m.Symlinks[0].Target = "/etc/passwd" }, "symlinks[0].target"},
		{"escaping link", func(m *Manifest) { m.Symlinks[0].Target = "../outside" }, "symlinks[0].target"},
		{"negative step", func(m *Manifest) { m.Step = -5 }, "step"},
		{"huge step", func(m *Manifest) { m.Step = MaxStep + 1 }, "step"},
		{"no created", func(m *Manifest) { m.Created = time.Time{} }, "created"},
		{"unknown major", func(m *Manifest) { m.Format = "2.0" }, "format"},
		{"no format", func(m *Manifest) { m.Format = "" }, "format"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := valid()
			c.mod(m)
			err := Validate(m, "run")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not name %s", err, c.field)
			}
		})
	}
}

func TestDecodeRejectsFutureMajorAndGarbage(t *testing.T) {
	if _, err := DecodeBytes([]byte(`{"format":"4.0","step":1}`), "run"); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("future major: %v", err)
	}
	if _, err := DecodeBytes([]byte(`{"format":"1.7","step":1,"created":"2026-01-01T00:00:00Z","files":[],"future_field":true}`), "run"); err != nil {
		t.Fatalf("a newer minor version with an unknown field must be read: %v", err)
	}
	if _, err := DecodeBytes([]byte(`not json`), "run"); err == nil {
		t.Fatal("garbage accepted")
	}
}

func TestKeysSortNewestFirst(t *testing.T) {
	a, b := ManifestKey("run", 9), ManifestKey("run", 10)
	if !(b < a) {
		t.Fatalf("key of step 10 %q does not sort before step 9 %q", b, a)
	}
	for _, step := range []int64{0, 1, 999, MaxStep} {
		got, ok := StepFromManifestKey("run", ManifestKey("run", step))
		if !ok || got != step {
			t.Errorf("StepFromManifestKey(ManifestKey(%d)) = %d, %v", step, got, ok)
		}
	}
	for _, bad := range []string{"run/manifests/x.json", "run/manifests/999999999990-000000000010.json", "other/manifests/" + ManifestKey("", 1)} {
		if _, ok := StepFromManifestKey("run", bad); ok {
			t.Errorf("%q parsed as a manifest key", bad)
		}
	}
	if ManifestKey("", 1) != "manifests/999999999998-000000000001.json" {
		t.Errorf("empty prefix key = %q", ManifestKey("", 1))
	}
}

func TestParseURL(t *testing.T) {
	loc, err := ParseURL("s3://my-bucket/a/b/")
	if err != nil || loc.Bucket != "my-bucket" || loc.Prefix != "a/b" || loc.String() != "s3://my-bucket/a/b" {
		t.Fatalf("ParseURL = %+v, %v", loc, err)
	}
	loc, err = ParseURL("file:///lustre/ckpt/")
	if err != nil || loc != (Location{Scheme: FileScheme, Bucket: "/lustre/ckpt"}) || loc.String() != "file:///lustre/ckpt" || !loc.IsFile() {
		t.Fatalf("ParseURL(file:///lustre/ckpt/) = %+v, %v", loc, err)
	}
	if got := loc.URL(ManifestKey(loc.Prefix, 1)); got != "file:///lustre/ckpt/manifests/999999999998-000000000001.json" {
		t.Errorf("URL of a manifest = %q", got)
	}
	if got := (Location{Bucket: "b", Prefix: "p"}).URL("p/x"); got != "s3://b/p/x" {
		t.Errorf("URL of an object = %q", got)
	}
	for _, bad := range []string{"my-bucket/x", "s3://", "s3:///x", "s3://b/../x", "http://b/x",
		"file://", "file:///", "file://host/x", "file://relative", "file:///a/../b", "file:///a//b", "file:///a/./b", "file:///a\x00b"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) accepted", bad)
		}
	}
}
