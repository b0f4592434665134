package detect

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	"go.uber.org/zap"
)

// The Hugging Face record. A sharded save_pretrained writes its shards
// (model-00001-of-00003.safetensors, or pytorch_model-...bin) and then
// "<name>.safetensors.index.json" (or "pytorch_model.bin.index.json"),
// whose weight_map names the shard of every tensor. A step whose index
// names a shard that is not beside it is not the save the trainer made
// (a shard deleted, or not written yet), whatever its trainer_state.json
// says; each shard's own header says whether it is whole (selfcheck.go).
// An index that cannot be read falls back to the marker rules, with one
// warning per version.

// maxIndexSize bounds an index read: the largest models' are a few MB.
const maxIndexSize = 64 << 20

type indexRead struct {
	shards []string
	err    error
}

// requireIndexed holds c while an index in its root names a shard that
// is not there.
func (l *hfLayout) requireIndexed(t *Tree, c *Candidate, root string) {
	if !c.Finished {
		return
	}
	for _, e := range t.Children(root) {
		name := e.Name()
		if !e.IsRegular() || !strings.HasSuffix(name, ".index.json") {
			continue
		}
		shards, ok := l.index(t, e)
		if !ok {
			continue
		}
		for _, s := range shards {
			p := root + "/" + s
			if f, ok := t.Get(p); !ok || !f.IsRegular() {
				c.Finished, c.Waiting = false, fmt.Sprintf("record: %s names %s, which is not here", e.Path, p)
				return
			}
		}
	}
}

// index returns the shards an index names, reading each version once.
func (l *hfLayout) index(t *Tree, e Entry) ([]string, bool) {
	r, first := l.indexes.get(e, func() indexRead { return readIndex(t, e) })
	if first && r.err != nil && l.log != nil {
		l.log.Warn("Hugging Face index not read as a record of the step; its completion falls back to trainer_state.json's rules",
			zap.String("file", e.Path), zap.Error(r.err))
	}
	return r.shards, r.err == nil
}

func readIndex(t *Tree, e Entry) indexRead {
	data, err := readWhole(t, e, maxIndexSize)
	if err != nil {
		return indexRead{err: err}
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return indexRead{err: err}
	}
	if len(idx.WeightMap) == 0 {
		return indexRead{err: fmt.Errorf("no weight_map")}
	}
	set := map[string]bool{}
	for _, s := range idx.WeightMap {
		if s == "" || s != path.Base(s) || s == "." || s == ".." {
			return indexRead{err: fmt.Errorf("weight_map names %q, not a file beside the index", s)}
		}
		set[s] = true
	}
	shards := make([]string, 0, len(set))
	for s := range set {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	return indexRead{shards: shards}
}
