package detect

import (
	"errors"
	"fmt"
	"regexp"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/dsrecord"
)

// The DeepSpeed record. DeepSpeed's latest file says only which tag rank
// 0 saved last: DeepSpeedEngine.save_checkpoint (deepspeed/runtime/
// engine.py, v0.19.5) has every rank write its files, then global rank 0
// writes latest (open 'w', the tag, no newline) and only then do all
// ranks meet at dist.barrier(): latest vouches for rank 0's files, not
// for another rank's. What the step must hold is recorded elsewhere: rank
// 0's model states file, written before latest, holds dp_world_size and
// mp_world_size (internal/dsrecord), and DeepSpeed's own loader opens
// exactly one optimizer file per data-parallel rank of each
// model-parallel rank (_get_all_zero_checkpoint_names) and one model
// states file per model-parallel rank. So once latest names a tag and is
// newer than rank 0's files, the step is held until every file the
// record implies is here:
//
//   - "mp_rank_{m:02d}_model_states.pt" for m < mp_world_size (not under
//     ZeRO-3, whose per-rank "zero_pp_rank_{d}_mp_rank_{m:02d}_model_
//     states.pt" MiCS writes for the first shard group only: engine.py
//     is_first_weights_partition_group; zeroHeld pairs those);
//   - when the step has ZeRO optimizer files at all (rank 0 writes its own
//     before latest), "{bf16_}zero_pp_rank_{d}_mp_rank_{m:02d}_optim_
//     states.pt" for d < dp_world_size and m < mp_world_size.
//
// The record gives no sizes: a file of the set is checked for presence
// (and, as every torch.save file, for its zip end record: selfcheck.go);
// the settle window and the writer veto decide the rest. On a node of a
// multi-node job the implied files may be other nodes', and nothing is
// checked; nor in a mixture-of-experts step (dsMoE). A record that cannot
// be read (not a torch.save zip, no world sizes) is warned about once per
// version and the step falls back to the latest-file rules.

var (
	dsModelRank0 = []string{"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"}
	dsOptim      = regexp.MustCompile(`^(bf16_)?zero_pp_rank_\d+_mp_rank_\d+_optim_states\.pt$`)
	dsExpert     = regexp.MustCompile(`^(?:expp_rank_|expert_|layer_\d+_expert_)`)
)

type dsRead struct {
	rec dsrecord.Record
	err error
}

// requireImplied holds c while a file its record implies is missing.
func (l *deepspeedLayout) requireImplied(t *Tree, c *Candidate, root string) {
	if !c.Finished || l.multiNode || c.Held != "" || dsMoE(t, root) {
		return
	}
	var recEntry Entry
	found := false
	for _, name := range dsModelRank0 {
		if e, ok := t.Get(root + "/" + name); ok && e.IsRegular() {
			recEntry, found = e, true
			break
		}
	}
	if !found {
		c.Held = fmt.Sprintf("record: %s/%s (rank 0's model states, written before latest) is not here", root, dsModelRank0[0])
		return
	}
	rec, ok := l.record(t, recEntry)
	if !ok {
		return
	}
	if missing := dsMissing(t, root, recEntry, rec); missing != "" {
		c.Held = fmt.Sprintf("record: %s is not here (expected: present, of any size, as DeepSpeed records no sizes; found: nothing): %s records dp_world_size %d and mp_world_size %d, and DeepSpeed loads the files of every rank they give",
			missing, recEntry.Path, rec.DPWorldSize, rec.MPWorldSize)
	}
}

// dsMoE reports whether the step holds mixture-of-experts files
// ("expert_..." / "layer_{L}_expert_{E}_..." model states, "expp_rank_..."
// optimizer states: engine.py _save_moe_checkpoint), whose writers the
// world sizes do not give: such a step keeps the latest file's rules.
func dsMoE(t *Tree, root string) bool {
	for _, e := range t.Children(root) {
		if dsExpert.MatchString(e.Name()) {
			return true
		}
	}
	return false
}

// dsMissing returns the first file the record implies that is not a
// regular file of root, or "".
func dsMissing(t *Tree, root string, recEntry Entry, rec dsrecord.Record) string {
	have := func(name string) bool {
		e, ok := t.Get(root + "/" + name)
		return ok && e.IsRegular()
	}
	if recEntry.Name() == dsModelRank0[0] {
		for m := range rec.MPWorldSize {
			if name := fmt.Sprintf("mp_rank_%02d_model_states.pt", m); !have(name) {
				return root + "/" + name
			}
		}
	}
	prefix, ok := dsOptimPrefix(t, root)
	if !ok {
		return ""
	}
	for m := range rec.MPWorldSize {
		for d := range rec.DPWorldSize {
			if name := fmt.Sprintf("%szero_pp_rank_%d_mp_rank_%02d_optim_states.pt", prefix, d, m); !have(name) {
				return root + "/" + name
			}
		}
	}
	return ""
}

// dsOptimPrefix returns the prefix of the step's ZeRO optimizer files
// ("bf16_" when bf16 is enabled: engine.py _get_zero_ckpt_prefix): rank
// 0's, else the first found; ok is false when the step has none.
func dsOptimPrefix(t *Tree, root string) (prefix string, ok bool) {
	for _, p := range []string{"", "bf16_"} {
		if e, found := t.Get(root + "/" + p + "zero_pp_rank_0_mp_rank_00_optim_states.pt"); found && e.IsRegular() {
			return p, true
		}
	}
	for _, e := range t.Children(root) {
		if m := dsOptim.FindStringSubmatch(e.Name()); m != nil && e.IsRegular() {
			return m[1], true
		}
	}
	return "", false
}

// record returns the record rank 0's model states file e holds, reading
// each version once; ok is false when it cannot be read (warned once per
// version).
func (l *deepspeedLayout) record(t *Tree, e Entry) (dsrecord.Record, bool) {
	r, first := l.records.get(e, func() dsRead {
		f, st, err := t.openRegular(e.Path)
		if err != nil {
			return dsRead{err: err}
		}
		defer f.Close()
		if st.Size != e.Size || !st.ModTime.Equal(e.ModTime) {
			return dsRead{err: errRecordChanged}
		}
		rec, err := dsrecord.Read(f, st.Size)
		return dsRead{rec: rec, err: err}
	})
	if first && r.err != nil && !errors.Is(r.err, errRecordChanged) && l.log != nil {
		l.log.Warn("DeepSpeed model states not read as a record of the step; its completion falls back to the latest file's rules",
			zap.String("file", e.Path), zap.Int64("bytes", e.Size), zap.Error(r.err))
	}
	return r.rec, r.err == nil
}
