package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Damage is the record of a committed step found not restorable as
// recorded, kept at manifest.DamagedKey beside the manifests. The first
// restore (or ferry verify --mark-damaged) that finds the damage writes it
// create-only; every restore that falls back skips the step from then on,
// so that all the nodes of a job land on the same step. ferry verify
// --clear-damaged removes it.
type Damage struct {
	Step int64 `json:"step"`
	// Path is the file of the step that is damaged (its path in the
	// manifest) and Key its object; both empty when the manifest is.
	Path string `json:"path,omitempty"`
	Key  string `json:"key,omitempty"`
	// Reason is what was wrong, as the restore or verify said it.
	Reason string `json:"reason"`
	// By names who found it (host name and command), At when.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// maxDamageRecord bounds what is read of a record: they are written by
// ferry, a few hundred bytes, but read from a bucket others may write.
const maxDamageRecord = 64 << 10

// RecordDamage writes d create-only. It reports whether this call wrote
// it; a record already there (another node found the damage first) is
// not an error.
func RecordDamage(ctx context.Context, st store.Store, prefix string, d Damage) (bool, error) {
	data, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	key := manifest.DamagedKey(prefix, d.Step)
	return createOnly(ctx, st, key, data, "record damaged step "+fmt.Sprint(d.Step), nil)
}

// DamagedSteps reads the damage records under prefix, by step (one LIST,
// and a GET per record). A record that cannot be read or decoded still
// marks its step, with the reason saying so.
func DamagedSteps(ctx context.Context, st store.Store, prefix string) (map[int64]Damage, error) {
	var keys []string
	err := st.List(ctx, manifest.DamagedPrefix(prefix), "", 0, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list damage records under %s: %w", manifest.DamagedPrefix(prefix), err)
	}
	out := map[int64]Damage{}
	for _, key := range keys {
		step, ok := manifest.StepFromDamagedKey(prefix, key)
		if !ok {
			continue
		}
		data, err := ReadObject(ctx, st, key)
		if errors.Is(err, store.ErrNotExist) {
			continue // cleared meanwhile
		}
		out[step] = decodeDamage(step, key, data, err)
	}
	return out, nil
}

// DamageOf reads the damage record of step, with one GET: whether there
// is one, and what it says. A restore of the latest step asks just before
// it places the step, so that a node does not place a step another node
// found damaged while both were reading it.
func DamageOf(ctx context.Context, st store.Store, prefix string, step int64) (Damage, bool, error) {
	key := manifest.DamagedKey(prefix, step)
	data, err := ReadObject(ctx, st, key)
	switch {
	case errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrNoBucket):
		return Damage{}, false, nil
	case err != nil && ctx.Err() != nil:
		return Damage{}, false, err
	case err != nil:
		return Damage{}, false, fmt.Errorf("read the damage record of step %d: %w", step, err)
	}
	return decodeDamage(step, key, data, nil), true, nil
}

// decodeDamage decodes the record at key (read with err). A record that
// cannot be read or decoded still marks its step, with the reason saying
// so.
func decodeDamage(step int64, key string, data []byte, err error) Damage {
	d := Damage{Step: step}
	switch {
	case err != nil:
		d.Reason = fmt.Sprintf("recorded damaged (the record %s could not be read: %v)", key, err)
	case len(data) > maxDamageRecord || json.Unmarshal(data, &d) != nil || d.Step != step:
		d = Damage{Step: step, Reason: fmt.Sprintf("recorded damaged (the record %s is not one ferry wrote)", key)}
	}
	return d
}

// ClearDamage removes the damage record of step, reporting whether there
// was one.
func ClearDamage(ctx context.Context, st store.Store, prefix string, step int64) (bool, error) {
	key := manifest.DamagedKey(prefix, step)
	if _, err := st.Head(ctx, key); errors.Is(err, store.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("clear damage record of step %d: %w", step, err)
	}
	if err := st.Delete(ctx, key); err != nil && !errors.Is(err, store.ErrNotExist) {
		return false, fmt.Errorf("clear damage record of step %d: %w", step, err)
	}
	return true, nil
}
