package agent

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/agent/detect"
)

// The save-schedule fuzzer's trainer: a seeded generator of what trainers
// do to a checkpoint folder (savefuzz_test.go runs it against the agent).
// Every write goes through fz, which can kill the "job" at any operation
// (a file then stays cut short, as a SIGKILL leaves it), and which records
// every state of a step the trainer completed: the oracle.

// fileState is a step's files as the trainer left them: path -> BLAKE3.
type fileState map[string]string

func (s fileState) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k+"="+s[k][:8])
	}
	sort.Strings(keys)
	return "{" + strings.Join(keys, " ") + "}"
}

// fz is one schedule's trainer.
type fz struct {
	rng *rand.Rand
	dir string
	// ops counts operations; the one numbered crashAt kills the save.
	ops, crashAt int
	dead         bool
	// world is the job's number of ranks: a rolled-back job saving a step
	// again has the same ranks, so its save overwrites every torn file.
	world int
	// torn holds the files a kill left cut short (the single layout's
	// versions are made of whole files only).
	torn map[string]bool
	mu   sync.Mutex
	// complete holds, per step key, every state the trainer completed;
	// numbers maps the keys that are not step numbers to the schedule's.
	complete map[string][]fileState
	numbers  map[string]int64
	// deleted holds the steps deleted whole from their last completed
	// state, gone those deleted or cut from another one.
	deleted, gone map[string]bool
	// saved is, per rank, the steps this job's process saved (Composer's
	// rotation deletes the oldest); a restart begins a new list.
	saved map[int][]int64
	// keep is how many checkpoints each rank keeps (0: all).
	keep int
	// history is the schedule as run, for a failure's report.
	history []string
	// torchSave says which other names are torch.save archives (a
	// trace's torch-save header); nil: by suffix alone.
	torchSave func(rel string) bool
	// dsWorld is the data- and model-parallel world sizes DeepSpeed's
	// model states record (a trace's deepspeed-world header; 0: none).
	dsWorld [2]int
}

func (f *fz) note(format string, args ...any) {
	f.history = append(f.history, fmt.Sprintf(format, args...))
}

func (f *fz) abs(rel string) string { return filepath.Join(f.dir, filepath.FromSlash(rel)) }

// next counts an operation and reports whether it is the one the job dies
// at (the caller then does its part of it and stops).
func (f *fz) next() (crash bool) {
	f.ops++
	if f.ops == f.crashAt {
		f.dead = true
		f.note("  KILLED at operation %d", f.ops)
		return true
	}
	return false
}

// content makes a file's bytes in the format its name implies, so that
// the agent's format checks see what real trainers write.
func (f *fz) content(rel string, size int) []byte {
	rel = strings.TrimSuffix(rel, ".tmp") // written under a temporary name, renamed
	raw := make([]byte, size)
	f.rng.Read(raw)
	switch {
	case f.dsWorld[0] > 0 && dsModelStates.MatchString(rel):
		return torchSaveArchive(dsRecordPickle(f.dsWorld[0], f.dsWorld[1]), raw)
	case strings.HasSuffix(rel, ".json"):
		// One JSON document of about size bytes, as json.dump writes.
		pad := make([]byte, max(size-10, 0))
		for i := range pad {
			pad[i] = 'a' + raw[i]%26
		}
		return []byte(`{"pad": "` + string(pad) + `"}`)
	case strings.HasSuffix(rel, ".safetensors"):
		header, _ := json.Marshal(map[string]any{"w": map[string]any{"dtype": "U8", "shape": []int{size}, "data_offsets": []int{0, size}}})
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		return append(append(out, header...), raw...)
	case strings.HasSuffix(rel, ".pt"), strings.HasSuffix(rel, ".pth"), strings.HasSuffix(rel, ".tar"), strings.HasSuffix(rel, ".ckpt"),
		f.torchSave != nil && f.torchSave(rel):
		return storedZip(zipMember{"archive/data/0", raw})
	}
	return raw
}

// dsModelStates matches DeepSpeed's model states files (engine.py
// _get_ckpt_name: "mp_rank_{mp:02d}_model_states.pt", under ZeRO-3 with
// "zero_pp_rank_{dp}_" before it), not pipeline layers' files.
var dsModelStates = regexp.MustCompile(`(^|/)(zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt$`)

// dsRecordPickle is a pickle (protocol 2, as torch.save writes) of the
// part of DeepSpeed's checkpoint state dict the agent reads.
func dsRecordPickle(dp, mp int) []byte {
	out := []byte{0x80, 2, '}', 'q', 0, '('}
	for i, kv := range []struct {
		k string
		v int
	}{{"dp_world_size", dp}, {"mp_world_size", mp}} {
		out = append(out, 'X')
		out = binary.LittleEndian.AppendUint32(out, uint32(len(kv.k)))
		out = append(out, kv.k...)
		out = append(out, 'q', byte(i+1), 'M')
		out = binary.LittleEndian.AppendUint16(out, uint16(kv.v))
	}
	return append(out, 'u', '.')
}

// torchSaveArchive lays out a torch.save zip archive: the pickle as
// archive/data.pkl and the storage bytes as archive/data/0.
func torchSaveArchive(pkl, storage []byte) []byte {
	return storedZip(zipMember{"archive/data.pkl", pkl}, zipMember{"archive/data/0", storage}, zipMember{"archive/version", []byte("3\n")})
}

// zipMember is one member of storedZip's archive.
type zipMember struct {
	name string
	data []byte
}

// storedZip is a zip archive of members, stored uncompressed as
// torch.save stores them.
func storedZip(members ...zipMember) []byte {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	for _, m := range members {
		w, _ := z.CreateHeader(&zip.FileHeader{Name: m.name, Method: zip.Store})
		_, _ = w.Write(m.data)
	}
	_ = z.Close()
	return buf.Bytes()
}

// write writes a file in chunks with pauses, in place (O_TRUNC), as
// torch.save does; killed, it leaves a prefix.
func (f *fz) write(rel string, size, chunks int, pause time.Duration) {
	if f.dead {
		return
	}
	crash := f.next()
	data := f.content(rel, size)
	f.markTorn(rel, crash)
	if crash {
		data = data[:f.rng.Intn(len(data))]
	}
	f.note("  write %s (%d bytes, %d chunks, %v apart)", rel, len(data), chunks, pause)
	_ = os.MkdirAll(filepath.Dir(f.abs(rel)), 0o755)
	fh, err := os.OpenFile(f.abs(rel), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	for i := range chunks {
		if i > 0 {
			time.Sleep(pause)
		}
		lo, hi := min(i*size/chunks, len(data)), min((i+1)*size/chunks, len(data))
		if i == chunks-1 {
			hi = len(data)
		}
		if _, err := fh.Write(data[lo:hi]); err != nil {
			panic(err)
		}
	}
	if err := fh.Close(); err != nil {
		panic(err)
	}
}

// text writes a small file at once (a marker or pointer).
func (f *fz) text(rel, content string) {
	if f.dead || f.next() {
		return
	}
	f.note("  text %s = %q", rel, content)
	_ = os.MkdirAll(filepath.Dir(f.abs(rel)), 0o755)
	if err := os.WriteFile(f.abs(rel), []byte(content), 0o644); err != nil {
		panic(err)
	}
}

func (f *fz) rename(from, to string) {
	if f.dead || f.next() {
		return
	}
	f.markTorn(to, f.torn[from])
	f.note("  rename %s -> %s", from, to)
	if err := os.Rename(f.abs(from), f.abs(to)); err != nil {
		panic(err)
	}
}

func (f *fz) remove(rel string) {
	f.note("  remove %s", rel)
	if err := os.RemoveAll(f.abs(rel)); err != nil {
		panic(err)
	}
}

func (f *fz) sleep(d time.Duration) {
	if !f.dead && d > 0 {
		time.Sleep(d)
	}
}

func (f *fz) exists(rel string) bool {
	_, err := os.Lstat(f.abs(rel))
	return err == nil
}

// snapshot hashes the files below dir ("" for the root's checkpoint files
// of the single layout).
func (f *fz) snapshot(dir string) fileState {
	out := fileState{}
	hash := func(rel string) {
		data, err := os.ReadFile(f.abs(rel))
		if err != nil {
			panic(err)
		}
		sum := blake3.Sum256(data)
		out[rel] = hex.EncodeToString(sum[:])
	}
	if dir == "" {
		entries, _ := os.ReadDir(f.dir)
		for _, e := range entries {
			if e.Type().IsRegular() && detect.IsCheckpointFile(e.Name()) && !f.torn[e.Name()] {
				hash(e.Name())
			}
		}
		return out
	}
	_ = filepath.WalkDir(f.abs(dir), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(f.dir, p)
			hash(filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}

// completed records the state of a step the trainer just completed.
func (f *fz) completed(key, dir string) {
	s := f.snapshot(dir)
	f.mu.Lock()
	f.complete[key] = append(f.complete[key], s)
	f.mu.Unlock()
	f.note("  complete %s %v", key, s)
}

// completedState records state s as one the trainer completed for step n
// under key.
func (f *fz) completedState(key string, n int64, s fileState) {
	f.mu.Lock()
	f.complete[key] = append(f.complete[key], s)
	if f.numbers == nil {
		f.numbers = map[string]int64{}
	}
	f.numbers[key] = n
	f.mu.Unlock()
	delete(f.deleted, key) // a new complete state is on disk
	delete(f.gone, key)
	f.note("  complete %s %v", key, s)
}

// gap is a pause between a trainer's operations: mostly short, sometimes
// as long as a rank lagging behind (within a settle window: a rank that
// starts later than that, in a layout whose marker does not count ranks,
// is invisible without --expected-ranks, which docs/agent.md says).
func (f *fz) gap() time.Duration {
	switch f.rng.Intn(6) {
	case 0:
		return 0
	case 5:
		return time.Duration(800+f.rng.Intn(1700)) * time.Millisecond
	}
	return time.Duration(f.rng.Intn(400)) * time.Millisecond
}

func (f *fz) size() int { return 1<<10 + f.rng.Intn(96<<10) }

func (f *fz) chunks() (int, time.Duration) {
	return 1 + f.rng.Intn(4), time.Duration(f.rng.Intn(150)) * time.Millisecond
}

// file writes one file of random size and pacing.
func (f *fz) file(rel string) {
	c, p := f.chunks()
	f.write(rel, f.size(), c, p)
}

// ranks returns the order a save's ranks write in.
func (f *fz) ranks() []int {
	if f.world == 0 {
		f.world = 1 + f.rng.Intn(3)
	}
	return f.rng.Perm(f.world)
}

// copyFile copies a file in place at its destination (shutil.copyfile).
func (f *fz) copyFile(from, to string) {
	if f.dead {
		return
	}
	crash := f.next()
	data, err := os.ReadFile(f.abs(from))
	if err != nil {
		panic(err)
	}
	f.markTorn(to, crash)
	if crash {
		data = data[:f.rng.Intn(len(data))]
	}
	f.note("  copy %s -> %s (%d bytes)", from, to, len(data))
	if err := os.WriteFile(f.abs(to), data, 0o644); err != nil {
		panic(err)
	}
}

// markTorn records whether a write left rel cut short.
func (f *fz) markTorn(rel string, torn bool) {
	if f.torn == nil {
		f.torn = map[string]bool{}
	}
	f.torn[rel] = torn
}
