package dcprecord

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// want.json is what torch 2.6 itself read back from each .metadata
// (testdata/dcp-records/gen.py).
type want struct {
	Items  int              `json:"items"`
	Sizes  map[string]int64 `json:"sizes"`
	OnDisk map[string]int64 `json:"on_disk"`
}

func loadWant(t *testing.T) map[string]want {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/dcp-records/want.json")
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	out := map[string]want{}
	for k, v := range all {
		if k == "torch" {
			continue
		}
		var w want
		if err := json.Unmarshal(v, &w); err != nil {
			t.Fatal(err)
		}
		out[k] = w
	}
	if len(out) < 3 {
		t.Fatalf("want.json holds %d steps", len(out))
	}
	return out
}

func TestParseTorchRecords(t *testing.T) {
	for name, w := range loadWant(t) {
		data, err := os.ReadFile(filepath.Join("../../testdata/dcp-records", name, ".metadata"))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rec.Items != w.Items || !maps.Equal(rec.Sizes, w.Sizes) {
			t.Errorf("%s: read %d items %v, torch read %d items %v", name, rec.Items, rec.Sizes, w.Items, w.Sizes)
		}
		for f, size := range rec.Sizes {
			if w.OnDisk[f] != size {
				t.Errorf("%s: %s is %d bytes on disk, the record ends it at %d", name, f, w.OnDisk[f], size)
			}
		}
	}
}

// TestParseRefusesHostile: a record naming a path outside its folder,
// negative or absurd sizes, or something other than DCP's Metadata is an
// error, never a Record.
func TestParseRefusesHostile(t *testing.T) {
	data, err := os.ReadFile("../../testdata/dcp-records/world2/.metadata")
	if err != nil {
		t.Fatal(err)
	}
	// Same-length rewrites of the pickled strings keep every length valid.
	for _, c := range []struct{ from, to, why string }{
		{"__1_0.distcp", "../../etc/pw", "relative_path"},
		{"__1_0.distcp", "/etc/passwd1", "relative_path"},
		{"__1_0.distcp", "a//b.distcp1", "relative_path"},
		{"storage_data", "storage_dat_", "no storage_data"},
		{"_StorageInfo", "_StorageInfX", "not a _StorageInfo"},
		{"\x08Metadata", "\x08Metadatb", "not a DCP Metadata"},
	} {
		bad := bytes.ReplaceAll(data, []byte(c.from), []byte(c.to))
		if bytes.Equal(bad, data) {
			t.Fatalf("%q not found in the record", c.from)
		}
		if rec, err := Parse(bad); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%q -> %q: %v %v, want an error about %s", c.from, c.to, rec.Sizes, err, c.why)
		}
	}
	if _, err := Parse([]byte("dcp metadata")); err == nil {
		t.Error("12 bytes of text parsed as a record")
	}
}
