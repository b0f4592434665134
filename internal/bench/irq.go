package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// keepKernelOff moves device interrupts and the kernel's unbound work
// (writeback among it) off core cpu, onto the cores below it, and returns
// the function that puts them back. On this VM the disk's completion
// interrupts land on the last core, where the interference phase's server
// runs: the trainer's fsync then waited on a core the server kept busy,
// which a node whose store is remote never does. Failures (not root, an
// interrupt that cannot move) leave things as they were.
func keepKernelOff(cpu int) (restore func(), moved int) {
	if cpu < 1 {
		return func() {}, 0
	}
	others := fmt.Sprintf("0-%d", cpu-1)
	var undo []func()
	irqs, _ := filepath.Glob("/proc/irq/*/smp_affinity_list")
	for _, p := range irqs {
		old, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(old)) == others {
			continue
		}
		if os.WriteFile(p, []byte(others), 0) == nil {
			undo = append(undo, func() { _ = os.WriteFile(p, old, 0) })
			moved++
		}
	}
	const wq = "/sys/devices/virtual/workqueue/cpumask"
	if old, err := os.ReadFile(wq); err == nil {
		mask := fmt.Sprintf("%x", (uint64(1)<<cpu)-1)
		if os.WriteFile(wq, []byte(mask), 0) == nil {
			undo = append(undo, func() { _ = os.WriteFile(wq, old, 0) })
		}
	}
	return func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}, moved
}
