// Package remote is the protocol that commits and reads ferry's manifests in
// a bucket, over internal/store; package manifest is the format it writes
// and reads, and does no I/O.
//
//   - Commit makes a step exist with one create-only PUT of its manifest
//     (If-None-Match: *), the manifest's shards written first when one
//     document cannot hold its files; an identical manifest already there
//     counts as committed, a different one is ErrConflict.
//   - Revise replaces a committed manifest with its next revision at the
//     same key, with If-Match on the ETag it read, reading again when
//     another writer got there first.
//   - CommitNodePart and CompleteStep commit the step of a multi-node job:
//     each node writes its part create-only, and one node, the winner of a
//     create-only merge claim, merges the parts and commits (nodes.go,
//     claim.go).
//   - Get, GetFiltered and Resolve read a manifest and its shards; Steps,
//     LatestStep, Latest, StepAtOrBefore and Summaries list the history;
//     CheckObjects checks that every committed manifest's objects exist.
package remote
