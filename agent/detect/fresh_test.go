package detect

import (
	"archive/zip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// at sets a file's (or a link's) modification time to base+d.
func at(t *testing.T, dir, rel string, base time.Time, d time.Duration) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	ts := base.Add(d)
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		tv := []unix.Timespec{unix.NsecToTimespec(ts.UnixNano()), unix.NsecToTimespec(ts.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, tv, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Chtimes(p, ts, ts); err != nil {
		t.Fatal(err)
	}
}

// A marker proves only the bytes written before it: for every layout with
// a marker, a covered file modified after the marker keeps the step from
// completing (it waits, with the reason), and the marker written again
// completes it. Files a marker does not cover (another rank's, written
// after it by design) do not.
func TestMarkerMustBeNewerThanItsFiles(t *testing.T) {
	base := time.Now().Add(-2 * time.Hour)
	cases := []struct {
		layout string
		files  []string // written in this order, a second apart
		marker string   // rewritten to complete the step again
		late   string   // written after the marker
		ok     bool     // late is not covered: the step completes anyway
		step   int64
	}{
		{"dcp", []string{"step-200/__0_0.distcp", "step-200/__1_0.distcp", "step-200/.metadata"}, "step-200/.metadata", "step-200/__1_0.distcp", false, 200},
		{"composer", []string{"ep1-ba20/__0_0.distcp", "ep1-ba20/.metadata"}, "ep1-ba20/.metadata", "ep1-ba20/__0_0.distcp", false, 20},
		{"hf", []string{"checkpoint-200/model.safetensors", "checkpoint-200/optimizer.pt", "checkpoint-200/rng_state_0.pth", "checkpoint-200/trainer_state.json"}, "checkpoint-200/trainer_state.json", "checkpoint-200/optimizer.pt", false, 200},
		{"hf", []string{"checkpoint-200/model.safetensors", "checkpoint-200/rng_state_0.pth", "checkpoint-200/trainer_state.json"}, "", "checkpoint-200/rng_state_1.pth", true, 200},
		{"deepspeed", []string{"global_step200/mp_rank_00_model_states.pt", "global_step200/zero_pp_rank_0_mp_rank_00_optim_states.pt", "latest"}, "latest", "global_step200/zero_pp_rank_0_mp_rank_00_optim_states.pt", false, 200},
		{"deepspeed", []string{"global_step200/mp_rank_00_model_states.pt", "global_step200/zero_pp_rank_0_mp_rank_00_optim_states.pt", "latest"}, "", "global_step200/zero_pp_rank_1_mp_rank_00_optim_states.pt", true, 200},
		{"megatron", []string{"iter_0000200/mp_rank_00/model_optim_rng.pt", "latest_checkpointed_iteration.txt"}, "latest_checkpointed_iteration.txt", "iter_0000200/mp_rank_00/model_optim_rng.pt", false, 200},
	}
	for _, c := range cases {
		t.Run(c.layout+"/"+c.late, func(t *testing.T) {
			dir := t.TempDir()
			for i, f := range c.files {
				content := "bytes of " + f
				switch filepath.Base(f) {
				case "latest":
					content = "global_step200"
				case "latest_checkpointed_iteration.txt":
					content = "200"
				}
				write(t, dir, f, content)
				at(t, dir, f, base, time.Duration(i)*time.Second)
			}
			write(t, dir, c.late, "written again after the marker")
			at(t, dir, c.late, base, time.Minute)
			h := newHarness(t, dir, Options{Layout: c.layout})
			h.expect(0)
			if c.ok {
				h.expect(testSettle, "complete 200")
				return
			}
			h.expect(testSettle)
			h.expect(time.Hour)
			p := h.w.Pending()
			if len(p) != 1 || p[0].Step != c.step || !strings.Contains(p[0].Reason, "is older than "+c.late) {
				t.Fatalf("pending %+v: want step %d waiting because its marker is older than %s", p, c.step, c.late)
			}
			data, err := os.ReadFile(filepath.Join(dir, c.marker))
			if err != nil {
				t.Fatal(err)
			}
			write(t, dir, c.marker, string(data)) // written again, now
			want := fmt.Sprintf("complete %d", c.step)
			if filepath.Dir(c.marker) == "." {
				// A marker in the root is not one of the step's files:
				// they settled long ago.
				h.expect(0, want)
				return
			}
			h.expect(0)
			h.expect(testSettle, want)
		})
	}
}

// Composer's single-file checkpoints: a rank's latest link vouches for its
// file only if it was repointed after the file was written.
func TestComposerLinkMustBeNewerThanFile(t *testing.T) {
	base := time.Now().Add(-2 * time.Hour)
	dir := t.TempDir()
	write(t, dir, "ep0-ba10-rank0.pt", "rank 0, batch 10")
	at(t, dir, "ep0-ba10-rank0.pt", base, 0)
	symlink(t, dir, "latest-rank0.pt", "ep0-ba10-rank0.pt")
	at(t, dir, "latest-rank0.pt", base, time.Second)
	write(t, dir, "ep0-ba10-rank0.pt", "rank 0, batch 10, saved again and killed")
	h := newHarness(t, dir, Options{Layout: "composer", ExpectedRanks: 1})
	h.expect(0)
	h.expect(testSettle)
	h.expect(time.Hour)
	if p := h.w.Pending(); len(p) != 1 || !strings.Contains(p[0].Reason, "latest-rank0.pt is older than ep0-ba10-rank0.pt") {
		t.Fatalf("pending %+v", p)
	}
	symlink(t, dir, "latest-rank0.pt", "ep0-ba10-rank0.pt") // repointed
	h.expect(0, "complete 10")
}

// writeTorchZip writes a zip archive as torch.save does, and returns its
// bytes.
func writeTorchZip(t *testing.T, p string) []byte {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for _, name := range []string{"archive/data.pkl", "archive/data/0", "archive/version"} {
		w, err := z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(strings.Repeat(name, 500))); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeSafetensors(t *testing.T, p string, dataLen int) []byte {
	t.Helper()
	header, _ := json.Marshal(map[string]any{
		"__metadata__": map[string]string{"format": "pt"},
		"w":            map[string]any{"dtype": "F32", "shape": []int{dataLen / 4}, "data_offsets": []int{0, dataLen}},
	})
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(append(out, header...), make([]byte, dataLen)...)
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTornReason(t *testing.T) {
	dir := t.TempDir()
	tr := newTree(dir)
	zipPath := filepath.Join(dir, "model.pt")
	whole := writeTorchZip(t, zipPath)
	if why := tornReason(tr, "model.pt"); why != "" {
		t.Fatalf("a whole torch.save archive is torn: %s", why)
	}
	for _, cut := range []int{4, 30, len(whole) / 2, len(whole) - 23, len(whole) - 1} {
		if err := os.WriteFile(zipPath, whole[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		if why := tornReason(tr, "model.pt"); !strings.Contains(why, "cut short") {
			t.Errorf("archive cut at %d of %d bytes: %q, want cut short", cut, len(whole), why)
		}
	}
	// As torch 2.x writes it: a zip64 end record and locator before the
	// classic end record, whose own fields still fit in 32 bits.
	z64 := withZip64End(whole)
	if err := os.WriteFile(zipPath, z64, 0o644); err != nil {
		t.Fatal(err)
	}
	if why := tornReason(tr, "model.pt"); why != "" {
		t.Fatalf("a whole archive with zip64 end records is torn: %s", why)
	}
	if err := os.WriteFile(zipPath, z64[:len(z64)-30], 0o644); err != nil {
		t.Fatal(err)
	}
	if why := tornReason(tr, "model.pt"); why == "" {
		t.Fatal("an archive with zip64 end records cut short is not torn")
	}
	// Whole, then the central directory lost in the middle: the record no
	// longer points at itself.
	broken := append(append([]byte(nil), whole[:len(whole)/2]...), whole[len(whole)-22:]...)
	if err := os.WriteFile(zipPath, broken, 0o644); err != nil {
		t.Fatal(err)
	}
	if why := tornReason(tr, "model.pt"); !strings.Contains(why, "central directory") {
		t.Errorf("archive with a misplaced end record: %q", why)
	}
	st := filepath.Join(dir, "model.safetensors")
	full := writeSafetensors(t, st, 4096)
	if why := tornReason(tr, "model.safetensors"); why != "" {
		t.Fatalf("whole safetensors torn: %s", why)
	}
	for _, cut := range []int{12, len(full) - 4096, len(full) - 1} {
		if err := os.WriteFile(st, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		if why := tornReason(tr, "model.safetensors"); why == "" {
			t.Errorf("safetensors cut at %d of %d: not torn", cut, len(full))
		}
	}
	// JSON: one whole document, or torn; empty is torn too.
	doc := []byte(`{"global_step": 200, "log_history": [{"loss": 1.5}, {"loss": 1.25}]}`)
	for _, cut := range []int{0, 1, len(doc) / 2, len(doc) - 1} {
		want := "not one whole JSON document"
		if cut == 0 {
			want = "it is empty"
		}
		if err := os.WriteFile(filepath.Join(dir, "trainer_state.json"), doc[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		if why := tornReason(tr, "trainer_state.json"); !strings.Contains(why, want) {
			t.Errorf("JSON cut at %d of %d: %q, want %q", cut, len(doc), why, want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "trainer_state.json"), append(doc, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if why := tornReason(tr, "trainer_state.json"); why != "" {
		t.Errorf("a whole JSON document is torn: %s", why)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.json"), []byte("not json at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if why := tornReason(tr, "notes.json"); why != "" {
		t.Errorf("a .json file that is no JSON object or array: %q, want no claim", why)
	}
	// A DCP shard begins with a zip archive but is not one: no claim.
	if err := os.WriteFile(filepath.Join(dir, "__0_0.distcp"), append(whole[:len(whole)/2:len(whole)/2], "raw storage"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if why := tornReason(tr, "__0_0.distcp"); why != "" {
		t.Errorf("a file of no known format: %q", why)
	}
}

// A step whose marker is fresh but which holds a torn torch.save file (a
// DeepSpeed rank killed after rank 0 wrote latest) waits.
func TestTornFileHoldsStep(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "global_step100/mp_rank_00_model_states.pt", "")
	whole := writeTorchZip(t, filepath.Join(dir, "global_step100/mp_rank_00_model_states.pt"))
	write(t, dir, "global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt", "")
	p1 := filepath.Join(dir, "global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt")
	if err := os.WriteFile(p1, whole[:len(whole)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "latest", "global_step100")
	h := newHarness(t, dir, Options{Layout: "deepspeed"})
	h.expect(0)
	h.expect(testSettle)
	if p := h.w.Pending(); len(p) != 1 || !strings.Contains(p[0].Reason, "zero_pp_rank_1_mp_rank_00_optim_states.pt: it is cut short") {
		t.Fatalf("pending %+v", p)
	}
	if err := os.WriteFile(p1, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	h.expect(testSettle, "complete 100")
}

// A shard deleted from a DCP folder after its .metadata was renamed in (a
// cleanup racing the save, seen by the watcher only afterwards) leaves a
// folder the marker does not describe: the step waits until .metadata is
// written again.
func TestDCPFolderChangedAfterMarker(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "step-100/__0_0.distcp", "r0")
	write(t, dir, "step-100/__1_0.distcp", "r1")
	write(t, dir, "step-100/.metadata.tmp", "md")
	if err := os.Rename(filepath.Join(dir, "step-100/.metadata.tmp"), filepath.Join(dir, "step-100/.metadata")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := os.Remove(filepath.Join(dir, "step-100/__0_0.distcp")); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, dir, Options{Layout: "dcp"})
	h.expect(0)
	h.expect(testSettle)
	if p := h.w.Pending(); len(p) != 1 || !strings.Contains(p[0].Reason, "were created or deleted") {
		t.Fatalf("pending %+v", p)
	}
	write(t, dir, "step-100/.metadata.tmp", "md again")
	if err := os.Rename(filepath.Join(dir, "step-100/.metadata.tmp"), filepath.Join(dir, "step-100/.metadata")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	h.expect(testSettle, "complete 100")
}

// withZip64End inserts a zip64 end of central directory record and its
// locator before a classic archive's end record, as torch 2.x does.
func withZip64End(whole []byte) []byte {
	eocd := len(whole) - 22
	cdSize := binary.LittleEndian.Uint32(whole[eocd+12:])
	cdOffset := binary.LittleEndian.Uint32(whole[eocd+16:])
	entries := binary.LittleEndian.Uint16(whole[eocd+10:])
	rec := []byte("PK\x06\x06")
	rec = binary.LittleEndian.AppendUint64(rec, 44)
	rec = binary.LittleEndian.AppendUint16(rec, 45)
	rec = binary.LittleEndian.AppendUint16(rec, 45)
	rec = binary.LittleEndian.AppendUint32(rec, 0)
	rec = binary.LittleEndian.AppendUint32(rec, 0)
	rec = binary.LittleEndian.AppendUint64(rec, uint64(entries))
	rec = binary.LittleEndian.AppendUint64(rec, uint64(entries))
	rec = binary.LittleEndian.AppendUint64(rec, uint64(cdSize))
	rec = binary.LittleEndian.AppendUint64(rec, uint64(cdOffset))
	loc := []byte("PK\x06\x07")
	loc = binary.LittleEndian.AppendUint32(loc, 0)
	loc = binary.LittleEndian.AppendUint64(loc, uint64(eocd))
	loc = binary.LittleEndian.AppendUint32(loc, 1)
	out := append(append([]byte(nil), whole[:eocd]...), rec...)
	out = append(out, loc...)
	return append(out, whole[eocd:]...)
}
