package manifest

import (
	"strings"
	"testing"
)

// packed returns valid() with its first file and a second small one packed
// into one object of 30 bytes.
func packed() *Manifest {
	m := valid()
	key := PackKey("run", m.Step, "x", "0001")
	m.Files[0].Key, m.Files[0].PackSize, m.Files[0].Offset = key, 30, 0
	m.Files = append(m.Files, File{Path: "extra_state.json", Size: 20, BLAKE3: hashA, Key: key, PackSize: 30, Offset: 10})
	return m
}

func TestPackedManifestIsFormat3(t *testing.T) {
	m := packed()
	data, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if m.Format != FormatVersion {
		t.Fatalf("Encode changed its argument's format to %s", m.Format)
	}
	got, err := DecodeBytes(data, "run")
	if err != nil {
		t.Fatalf("decode what Encode wrote: %v", err)
	}
	if got.Format != PackedFormat {
		t.Fatalf("format %q, want %q", got.Format, PackedFormat)
	}
	if f := got.Files[2]; !f.Packed() || f.Offset != 10 || f.ObjectSize() != 30 || f.Key != m.Files[0].Key {
		t.Fatalf("packed file read back as %+v", f)
	}
	if f := got.Files[1]; f.Packed() || f.ObjectSize() != f.Size {
		t.Fatalf("unpacked file read back as %+v", f)
	}
	// Without packs the format stays what it was.
	data, _ = Encode(valid())
	if got, _ := DecodeBytes(data, "run"); got.Format != FormatVersion {
		t.Fatalf("unpacked manifest written as %q", got.Format)
	}
	// A part manifest with packs is format 3 too.
	pd, err := EncodePart(&Part{Format: FormatVersion, Step: m.Step, Nodes: 1, Created: m.Created, Files: m.Files})
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePart(pd, "run")
	if err != nil || p.Format != PackedFormat {
		t.Fatalf("part: %+v, %v", p, err)
	}
}

func TestShardedPackedManifestIsFormat3(t *testing.T) {
	m := packed()
	var docs [][]byte
	h, err := EncodeShards(m, "run", "x", func(_ Shard, data []byte) error { docs = append(docs, data); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != PackedFormat || len(h.Shards) == 0 {
		t.Fatalf("sharded packed header: format %q, %d shards", h.Format, len(h.Shards))
	}
	if err := Validate(h, "run"); err != nil {
		t.Fatalf("sharded format 3 header: %v", err)
	}
}

func TestValidateRejectsBadPacks(t *testing.T) {
	for _, c := range []struct {
		name, want string
		mod        func(m *Manifest)
	}{
		{"packs in format 1", "packs need format 3", func(m *Manifest) { m.Format = FormatVersion }},
		{"packs in format 2", "packs need format 3", func(m *Manifest) {
			m.Format = "2.1"
			m.Shards = []Shard{{Key: "run/data/000000001000/x/shard-00000.json", Size: 100, BLAKE3: hashA, Files: 3}}
		}},
		{"past the pack's end", "outside its pack", func(m *Manifest) { m.Files[2].Offset = 11 }},
		{"negative offset", "outside its pack", func(m *Manifest) { m.Files[2].Offset = -1 }},
		{"offset without pack", "without a pack_size", func(m *Manifest) { m.Files[1].Offset = 5 }},
		{"multipart pack", "packs are one PUT", func(m *Manifest) { m.Files[2].PartSize = 8 << 20 }},
		{"two pack sizes", "object sizes 30 and 31", func(m *Manifest) { m.Files[2].PackSize = 31 }},
		{"a pack named by an unpacked file", "object sizes", func(m *Manifest) { m.Files[1].Key = m.Files[0].Key }},
		{"huge pack", "over", func(m *Manifest) { m.Files[0].PackSize, m.Files[2].PackSize = 6<<30, 6<<30 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := packed()
			m.Format = PackedFormat
			c.mod(m)
			err := Validate(m, "run")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "manifest field files[") {
				t.Fatalf("got %v, want an error naming the file and %q", err, c.want)
			}
		})
	}
	m := packed()
	m.Format = PackedFormat
	if err := Validate(m, "run"); err != nil {
		t.Fatalf("valid packed manifest: %v", err)
	}
}

func TestPackKeyIsNoFileKey(t *testing.T) {
	k := PackKey("run", 1000, "x", "0001")
	if !strings.HasPrefix(k, DataPrefix("run")) || strings.HasPrefix(k, DataKey("run", 1000, "x", "")) {
		t.Fatalf("pack key %q: want under the data prefix, beside the attempt's folder", k)
	}
}
