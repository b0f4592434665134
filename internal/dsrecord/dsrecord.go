// Package dsrecord reads what a DeepSpeed checkpoint records about its
// own extent: the data-parallel and model-parallel world sizes in the
// model states file, from which the files of the step follow.
//
// Facts from DeepSpeed v0.19.5 (deepspeed/runtime/engine.py):
//
//   - DeepSpeedEngine._common_checkpoint_state builds the dict that
//     _save_checkpoint writes as each model-parallel rank's model states
//     file ("mp_rank_{mp:02d}_model_states.pt", or under ZeRO-3
//     "zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt": _get_ckpt_name)
//     through TorchCheckpointEngine.save, that is torch.save. The dict holds
//     dp_world_size (self.seq_dp_world_size) and mp_world_size.
//   - Each data-parallel rank writes its optimizer partition as
//     "{bf16_}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt"
//     (_get_zero_ckpt_name, _save_zero_checkpoint).
//   - load_checkpoint reads dp_world_size back from the model states
//     (self.loaded_checkpoint_dp_world_size) and opens one optimizer file
//     for every dp_rank in range(dp_world_size) of its model-parallel rank
//     (_get_all_zero_checkpoint_names, _get_mp_rank_zero_checkpoint_names):
//     DeepSpeed itself takes a step to hold exactly those files.
//
// torch.save writes a zip archive whose "<name>/data.pkl" member is a
// pickle of the dict with a persistent id in place of each tensor's
// storage; only that member is read, with internal/pickle, which never
// executes anything.
package dsrecord

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ferrylabs/ferry/internal/pickle"
)

// MaxPickle bounds the data.pkl read: it holds names, shapes and the
// config, not tensors (a few MB for the largest models).
const MaxPickle = 64 << 20

// maxWorld bounds a world size taken from a record.
const maxWorld = 1 << 16

// Record is what a model states file says about the step's extent.
type Record struct {
	// DPWorldSize is the data-parallel world size ("dp_world_size"): the
	// number of optimizer partitions of each model-parallel rank.
	DPWorldSize int
	// MPWorldSize is the model-parallel world size ("mp_world_size"):
	// the number of model states files, and of optimizer file sets.
	MPWorldSize int
}

// ErrNotZip says the file is not a torch.save zip archive (torch.save's
// legacy format, _use_new_zipfile_serialization=False, or another writer).
var ErrNotZip = errors.New("not a torch.save zip archive")

// Read reads the record from a model states file of size bytes.
func Read(r io.ReaderAt, size int64) (Record, error) {
	data, err := DataPickle(r, size)
	if err != nil {
		return Record{}, err
	}
	v, err := pickle.Decode(data, pickle.DefaultLimits)
	if err != nil {
		return Record{}, err
	}
	top, ok := v.(*pickle.Dict)
	if !ok {
		return Record{}, fmt.Errorf("data.pkl holds a %T, not the dict DeepSpeed saves", v)
	}
	var rec Record
	for _, f := range []struct {
		key string
		to  *int
	}{{"dp_world_size", &rec.DPWorldSize}, {"mp_world_size", &rec.MPWorldSize}} {
		raw, ok := top.Get(f.key)
		if !ok {
			return Record{}, fmt.Errorf("no %s: not a DeepSpeed model states file", f.key)
		}
		n, ok := pickle.Int(raw)
		if !ok || n < 1 || n > maxWorld {
			return Record{}, fmt.Errorf("%s is %v, not a world size from 1 to %d", f.key, raw, maxWorld)
		}
		*f.to = int(n)
	}
	return rec, nil
}

// DataPickle returns the bytes of the "<name>/data.pkl" member of a
// torch.save zip archive of size bytes, at most MaxPickle.
func DataPickle(r io.ReaderAt, size int64) ([]byte, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotZip, err)
	}
	var member *zip.File
	for _, f := range zr.File {
		dir, base, ok := strings.Cut(f.Name, "/")
		if ok && dir != "" && base == "data.pkl" {
			if member != nil {
				return nil, fmt.Errorf("%w: two data.pkl members (%s, %s)", ErrNotZip, member.Name, f.Name)
			}
			member = f
		}
	}
	if member == nil {
		return nil, fmt.Errorf("%w: no <name>/data.pkl member", ErrNotZip)
	}
	if member.UncompressedSize64 > MaxPickle {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d read", member.Name, member.UncompressedSize64, MaxPickle)
	}
	rc, err := member.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", member.Name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxPickle+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", member.Name, err)
	}
	if uint64(len(data)) != member.UncompressedSize64 {
		return nil, fmt.Errorf("%s: %d bytes read, its entry says %d", member.Name, len(data), member.UncompressedSize64)
	}
	return data, nil
}
