package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// netns is a network namespace joined to the benchmark's by a veth pair.
// A server inside it, with the veth's receive processing steered to the
// server's core (RPS), does its network work on that core: over loopback
// the kernel would process what the agent sends on the agent's own core,
// in softirq, outside any priority the agent runs at.
type netns struct {
	name           string
	hostIf, nsIf   string
	hostIP, nsIP   string
	serverCPU      int
	serverCPUsMask string
}

// newNetns creates the namespace and the link (root only). The server's
// address inside it is nsIP.
func newNetns(serverCPU int) (*netns, error) {
	id := os.Getpid() % 100000
	n := &netns{name: fmt.Sprintf("ferrybench%d", id), hostIf: fmt.Sprintf("fbh%d", id), nsIf: fmt.Sprintf("fbn%d", id),
		hostIP: "10.233.0.1", nsIP: "10.233.0.2", serverCPU: serverCPU, serverCPUsMask: fmt.Sprintf("%x", uint64(1)<<serverCPU)}
	in := []string{"ip", "netns", "exec", n.name}
	steps := [][]string{
		{"ip", "netns", "add", n.name},
		{"ip", "link", "add", n.hostIf, "mtu", "9000", "type", "veth", "peer", "name", n.nsIf, "mtu", "9000"},
		{"ip", "link", "set", n.nsIf, "netns", n.name},
		{"ip", "addr", "add", n.hostIP + "/30", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		append(in, "ip", "addr", "add", n.nsIP+"/30", "dev", n.nsIf),
		append(in, "ip", "link", "set", n.nsIf, "up"),
		append(in, "ip", "link", "set", "lo", "up"),
		// What the server receives is processed on the server's core.
		append(in, "sh", "-c", fmt.Sprintf("echo %s > /sys/class/net/%s/queues/rx-0/rps_cpus", n.serverCPUsMask, n.nsIf)),
	}
	for _, argv := range steps {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			n.close()
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return n, nil
}

// wrap is the command prefix that runs a program in the namespace, pinned
// to the server's core.
func (n *netns) wrap() []string {
	return []string{"ip", "netns", "exec", n.name, "taskset", "-c", fmt.Sprint(n.serverCPU)}
}

// close deletes the namespace and with it the veth pair.
func (n *netns) close() {
	_ = exec.Command("ip", "link", "del", n.hostIf).Run()
	_ = exec.Command("ip", "netns", "del", n.name).Run()
}
