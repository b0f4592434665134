package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Sharded manifests (see manifest/shards.go for the format): the shards
// are written before the manifest, under the step's data prefix, so the
// manifest still commits the step in one PUT, and prune treats them like
// the step's file objects. A reader checks each shard it reads against the
// size and BLAKE3 the manifest records.

// writeShards writes m's files as shard objects and returns the manifest to
// commit: format 2.0, the shards listed, no files inline.
func writeShards(ctx context.Context, st store.Store, prefix string, m *manifest.Manifest) (*manifest.Manifest, error) {
	token := make([]byte, 6)
	_, _ = rand.Read(token)
	attempt := "manifest-" + hex.EncodeToString(token)
	return manifest.EncodeShards(m, prefix, attempt, func(sh manifest.Shard, data []byte) error {
		if _, err := st.Put(ctx, sh.Key, bytes.NewReader(data), sh.Size, store.PutOptions{CRC32C: store.CRC32C(data), ContentType: "application/json"}); err != nil {
			return fmt.Errorf("write manifest shard %s: %w", sh.Key, err)
		}
		return nil
	})
}

// Resolve reads the shards of a sharded manifest that filter selects (all
// when nil), checks each against its size and BLAKE3, and returns the
// manifest with their files, sorted by path and validated. A manifest that
// is not sharded is returned as it is. With a filter the result holds only
// the selected shards' files: enough for a restore of those ranks, not a
// description of the whole step.
func Resolve(ctx context.Context, st store.Store, prefix string, m *manifest.Manifest, filter manifest.ShardFilter) (*manifest.Manifest, error) {
	if !m.Sharded() {
		return m, nil
	}
	docs := make([][]manifest.File, len(m.Shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, sh := range m.Shards {
		if filter != nil && !filter(sh) {
			continue
		}
		g.Go(func() error {
			files, err := readShard(gctx, st, m.Step, i, sh)
			docs[i] = files
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := *m
	out.Files = nil
	for _, files := range docs {
		out.Files = append(out.Files, files...)
	}
	sort.Slice(out.Files, func(a, b int) bool { return out.Files[a].Path < out.Files[b].Path })
	if err := manifest.Validate(&out, prefix); err != nil {
		return nil, invalid(err)
	}
	return &out, nil
}

// readShard reads and checks shard i of a manifest.
func readShard(ctx context.Context, st store.Store, step int64, i int, sh manifest.Shard) ([]manifest.File, error) {
	data, err := ReadObject(ctx, st, sh.Key)
	if errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrNoBucket) {
		return nil, invalid(fmt.Errorf("read manifest shard %s: %w", sh.Key, err))
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest shard %s: %w", sh.Key, err)
	}
	files, err := manifest.DecodeShard(data, step, i, sh)
	if err != nil {
		return nil, invalid(err)
	}
	return files, nil
}
