// Package restore downloads a committed checkpoint step into a local
// directory and verifies every byte against the manifest's BLAKE3 hashes.
//
// Restore is a plain function over a store.Store. It reads the manifest,
// plans every path it will write (rejecting anything that could land outside
// the target directory before writing a byte), keeps files that are already
// correct, downloads the rest with parallel ranged GETs into temp files next
// to their final paths and verifies size and hash. Only once every file of
// the step is verified does it place the step (commit.go): files renamed
// into place, then the manifest's symlinks, then the frameworks' markers
// (markers.go), each file with the modification time its manifest records
// and each marker no older than the files it vouches for, so that an agent
// started on the folder reads a finished save. A final path only ever holds its old content or the
// verified new content, and a failed restore leaves it with its old one. With Options.Fsync (--fsync)
// each file is also fsynced before its rename, and every changed directory
// once at the end; without it the kernel writes the data back in its own
// time, and a later restore re-verifies what it finds before keeping it.
//
// What is replaced: a file with the wrong content, or a symlink where the
// manifest has a file, is replaced by rename (a link's target is never
// written); a link with another target is replaced by a temp link and
// rename. A directory where a file or link goes, or a regular file where a
// link goes, fails the restore before anything is written: those may be
// user data, and ferry does not delete what it did not write. Files the
// manifest does not mention are left alone. A step is placed whole or not
// at all: a restore that fails (a damaged object, a full disk, a cancel)
// leaves every final path as it was before it started, and one that is
// killed leaves its verified files under staged temp names, which the
// next restore of the step re-verifies and uses rather than downloading
// them again. Until the commit the old and new copies of a replaced file
// both take space.
//
// A damaged step (damaged.go: an object missing, cut short or of other
// bytes, a manifest that does not validate) is recorded in the bucket and,
// with Options.Fallback, skipped for the newest restorable one. The latest
// step is placed only if every node of a job can restore it
// (crosscheck.go): a restore of some ranks checks the size of every object
// it does not download, and reads the step's damage record again just
// before placing it; with Options.Barrier it then waits until every node
// of the job has verified its own files of the step (barrier.go), so a
// flipped byte only one node can see keeps every node from placing it.
//
// One restore at a time per target directory: a restore removes temp files
// left by an earlier, interrupted one, which would break a concurrent one.
//
// This package is ferry's implementation, used by cmd/ferry and ferry's
// other packages. It is importable, but its API carries no stability
// promise; the supported public API is package manifest (the remote format).
package restore
