// Package follow keeps a local folder in step with a run as it is
// committed, for evaluation nodes (ferry follow).
//
// The layout of the folder DIR it writes:
//
//	DIR/.ferry-follow.json      the cursor: what follow has placed, by step
//	DIR/.ferry-follow.staging/  the step being restored (and a replaced
//	                            revision on its way out)
//	DIR/<step>/                 one folder per step, named by its number
//	                            in decimal (DIR/1000/), holding the step's
//	                            files at their manifest paths
//
// Each poll is one LIST of the run's manifests (follow.go). A step is new
// when the cursor has no record of it, changed when the ETag the LIST
// shows is not the one recorded; nothing else is read unless a step is
// new or changed. A new step is restored into the staging folder
// (restore.Restore: every byte verified) and renamed into DIR/<step> as a
// whole (place.go), so an evaluation job reading DIR/<step> never sees
// part of a step. A changed step's manifest is read: a higher revision is
// restored the same way, seeded with hard links to the files of the
// folder it replaces so that only what changed is downloaded, and swapped
// in by renames; the old folder is then removed. Then the command of
// Options.Exec runs (exec.go), and the cursor records the step done.
//
// The cursor is written atomically (and durably) before each rename and
// after each step, so a restart neither downloads a placed step again nor
// misses one; a step placed whose command had not finished when follow
// stopped is placed again from its own folder (verified, not downloaded)
// and its command run again: commands run at least once per step.
//
// Damaged steps (restore.ErrDamaged, or recorded damaged in the bucket,
// remote.DamagedSteps) are skipped with a warning and recorded in the
// cursor with the ETag they had, so they are never tried again unless
// their manifest changes. Other failures (the network, the disk) stop the
// poll at that step, so steps are placed in order; the next poll tries it
// again.
//
// Only folders follow placed (recorded in the cursor) are ever replaced or
// deleted (Options.Keep); a DIR/<step> it did not make stops it with an
// error. One follow at a time per DIR.
package follow
