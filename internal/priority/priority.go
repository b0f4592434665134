// Package priority lowers the CPU and I/O priority of the whole process,
// every thread of it, so that a background agent yields to the training
// job it runs beside: the data loaders, tokenisation and host side of the
// training step are CPU-bound, and the next checkpoint's write competes
// with the upload for the disk.
//
// CPU: SCHED_IDLE, the lowest policy Linux has, which still runs whenever
// the trainer leaves a core idle; where it is refused, nice 19. I/O: the
// best-effort class at its lowest level (7), not the idle class, which a
// busy disk can starve for ever. Linux keeps both per thread, and a new
// thread starts with its creator's: Lower applies them to every thread the
// process has, so the threads the Go runtime starts later inherit them.
package priority

// Class is an I/O scheduling class (ioprio_set(2)).
type Class int

// I/O scheduling classes.
const (
	ClassNone       Class = 0
	ClassRealtime   Class = 1
	ClassBestEffort Class = 2
	ClassIdle       Class = 3
)

// Applied says what Lower set.
type Applied struct {
	// CPU is "SCHED_IDLE" or "nice 19".
	CPU string
	// IOClass and IOLevel are the I/O priority set (best-effort, 7).
	IOClass Class
	IOLevel int
	// Threads is how many threads were changed.
	Threads int
}

// Thread is one thread's priority as the kernel reports it.
type Thread struct {
	TID int
	// Policy is the scheduling policy (0 SCHED_OTHER, 5 SCHED_IDLE), from
	// /proc/self/task/TID/stat.
	Policy int
	// Nice is the thread's nice value, from the same file.
	Nice int
	// IOClass and IOLevel come from ioprio_get(2).
	IOClass Class
	IOLevel int
}
