// Package safepath decides whether a folder given by path can be trusted
// with a process's private state, as OpenSSH's StrictModes decides for
// ~/.ssh: every folder from / down to it must belong to the process's
// user or to root and be writable by no one else, and no component may be
// a symbolic link. Another user who could write any of those folders could
// rename it away and put a folder (or a link to one) of their choosing in
// its place, and the process would then create, chmod and write its files
// where that user decided.
//
// One exception, decided here once: a parent folder owned by root with the
// sticky bit (/tmp, /var/tmp) may be writable by all. The sticky bit stops
// its other users from renaming or removing an entry they do not own, so a
// folder of the user's own inside it (/tmp/ferry-state, mode 0700) is safe.
// The sticky folder itself is never trusted as the state folder.
//
// The folders are walked from / with one open descriptor per component
// (openat with O_NOFOLLOW|O_DIRECTORY), each checked with fstat on the
// descriptor that the next component is opened from, so a rename between
// the check and the use changes nothing. Missing folders are created
// (mode 0700) from the descriptor of their parent.
package safepath
