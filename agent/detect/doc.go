// Package detect turns a watched checkpoint directory into a stream of
// "step S is completely written, here are its files" events. It uploads
// nothing: the agent feeds its events to the uploader.
//
// # How completeness is decided
//
// A [Layout] maps the directory tree to candidate steps and says whether the
// framework's own marker declares each one finished (DCP's .metadata,
// DeepSpeed's latest file, Megatron's tracker file, ...), what in the tree
// still holds it back (Candidate.Held), which ranks have written their part
// (Candidate.Ranks) and what its evidence proves ([Proof]). A step is
// reported [Complete] only when all of these hold:
//
//   - the layout's marker says it is finished (unless [Options.NoMarker]),
//     and the marker is at least as new as every file it covers: a marker
//     older than the bytes (a step saved again after a rollback and killed
//     halfway) proves nothing, and the step waits (proof.go);
//   - no file is cut short by its own format (a torch.save zip without its
//     end record, a safetensors file shorter than its header: selfcheck.go);
//   - no file the marker declared has gone while the marker is unchanged,
//     and a pointer that names a later step was seen naming this one after
//     its files' last write when ferry saw it being written (declare.go);
//   - nothing holds it back: a DeepSpeed rank with model states but no
//     optimizer states yet, a Composer rank whose latest link names an
//     earlier batch (or no link at all in a folder whose checkpoints
//     were seen linked: Options.Linked), a step folder that is a
//     symbolic link, a NeMo step with an "-unfinished" marker beside
//     either folder or with a folder removed since it was finished
//     (nemo.go);
//   - the step is what the framework recorded: every file DCP's .metadata
//     names, at its size (dcprecord.go; also Megatron's torch_dist and
//     Composer's sharded folders), every shard a Hugging Face index
//     names (hfindex.go), every model and optimizer file the world sizes
//     in DeepSpeed's rank 0 model states imply (dsrecord.go), a
//     model_optim_rng.pt in every Megatron rank folder with no gap in the
//     rank indexes (megatronrecord.go), the file each Composer latest
//     link names (composer.go);
//   - no temporary name ([IsTempName]) lies in the step;
//   - with [Options.ExpectedRanks] set, that many ranks are accounted for:
//     the writers the file names give ([RankOf], or the (dp, mp) pair of a
//     ZeRO file, or a Megatron mp_rank_TT_PPP folder), or the layout's own
//     list (a Hugging Face rank's RNG state, a Composer rank whose link
//     names the step);
//   - and then either the settle window: the size and modification time of
//     every file, and the set of files, have been observed unchanged for
//     [Options.Settle], and no fsnotify event touched any of them in that
//     window; or, only where the evidence proves the file set final
//     (ProofMarker: a marker written after every rank finished, or NeMo's
//     "-unfinished" marker seen removed after every write; ProofRanks
//     with ExpectedRanks: the marker and each expected rank's last file),
//     close-write detection: every file was closed by its writer, is
//     unchanged since, and no process holds it open for writing;
//   - in either case, no file of the step is open for writing: a file with
//     a writer is never settled, however long it has been quiet (a rank
//     paused mid-write keeps its file open). The kernel's read lease tells;
//     where it cannot (a network filesystem, whose other hosts' writers
//     hold no local lease; another user's file without CAP_LEASE) the
//     settle window alone decides;
//   - every file can be opened for reading.
//
// Close-write detection never replaces the settle window where nothing
// proves the file set: a step without a marker, a late rank not known to
// exist, a writer that closes a file and reopens it all look "closed".
//
// Settling is observed by the [Watcher], not inferred from modification
// times: the clock of a network filesystem's server need not agree with
// ours, and a copy tool may set old times on a file it is still writing. The
// price is one settle window after start-up before an existing step is
// reported. [Watcher.Scan], which cannot observe, uses the age of the newest
// modification time instead.
//
// A step that has not changed for a settle window but still cannot complete
// (ranks the names do not carry, a stale pointer, a marker that never comes
// on this node, a linked step folder) is logged at warn once, with the
// reason, and shown by [Watcher.Pending].
//
// A step complete by these rules that vanishes before it is reported (a
// cleanup deleting it within its settle window) is reported [Lost]. The
// single layout (single.go) makes each version of a folder of whole
// checkpoint files a counted step of its own.
//
// A step reported Complete whose files change afterwards is reported
// Deleted (with [ErrChanged]) and, once complete again, Complete again:
// the agent publishes that version as a revision of the step.
//
// # Pointer files
//
// DeepSpeed's "latest" (except in a Lightning DeepSpeedStrategy folder,
// whose own latest names only its tag folder and is uploaded with it:
// dsnested.go), Megatron's "latest_checkpointed_iteration.txt" and
// Composer's "latest-rank{R}.pt" links tell a restarted trainer where to
// resume. They are rewritten in place at every save, so the live file may
// already name a newer step than the one being reported. A step therefore
// never carries the live pointer: it carries the pointer as it reads for
// that step, built by the layout ([Step.Generated] for files, [Step.Symlinks]
// for Composer's links), and restoring a step gives a tree the trainer
// resumes from at exactly that step.
//
// # Watching
//
// Every directory under the root is watched with fsnotify (new directories
// get a watch, then are listed, since files may appear before the watch is
// added). Events are collected for a short debounce window and then applied
// to an in-memory tree, so a burst of writes costs one evaluation. Timers
// wake the watcher when a pending step's settle window ends. A full rescan
// runs at start-up, every [Options.Rescan], and after fsnotify reports a
// queue overflow, whose lost events never come back. Idle, the watcher is
// blocked in select with no timer armed but the rescan ticker. [Options.Poll]
// replaces fsnotify by rescans for filesystems that deliver no events (NFS,
// Lustre and FUSE mounts written from other hosts).
//
// Symbolic links are never followed: a link inside the root whose target
// resolves inside the root is recorded as a [Symlink]; any other link is
// skipped with a warning.
//
// # Paths
//
// All paths in a [Step] are slash-separated and relative to the watched
// root, so a manifest built from them restores the same tree the trainer
// expects (for example global_step100/mp_rank_00_model_states.pt next to the
// latest file).
package detect
