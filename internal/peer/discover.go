package peer

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Resolve turns restore --peers into the peers' addresses, the same list
// in the same order on every node, each with port:
//   - "host:port,host:port,...": as given (a host without a port gets port);
//   - "slurm": the hosts of the job's allocation (SLURM_JOB_NODELIST,
//     expanded by `scontrol show hostnames` where it runs, else here);
//   - "dns:NAME": the addresses NAME resolves to, sorted (a Kubernetes
//     headless service over the job's pods).
func Resolve(ctx context.Context, spec, port string) ([]string, error) {
	var hosts []string
	switch {
	case spec == "slurm":
		list := os.Getenv("SLURM_JOB_NODELIST")
		if list == "" {
			return nil, fmt.Errorf("--peers slurm: SLURM_JOB_NODELIST is not set (not inside a SLURM job?)")
		}
		var err error
		if hosts, err = slurmHosts(ctx, list); err != nil {
			return nil, fmt.Errorf("--peers slurm: %w", err)
		}
	case strings.HasPrefix(spec, "dns:"):
		name := strings.TrimPrefix(spec, "dns:")
		addrs, err := net.DefaultResolver.LookupHost(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("--peers %s: %w", spec, err)
		}
		slices.Sort(addrs)
		hosts = addrs
	default:
		for _, h := range strings.Split(spec, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hosts = append(hosts, h)
			}
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("--peers %q names no node", spec)
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		if _, _, err := net.SplitHostPort(h); err == nil {
			out[i] = h
		} else {
			out[i] = net.JoinHostPort(h, port)
		}
	}
	return out, nil
}

// slurmHosts expands a SLURM node list with scontrol, or here when
// scontrol is not on the PATH.
func slurmHosts(ctx context.Context, list string) ([]string, error) {
	if path, err := exec.LookPath("scontrol"); err == nil {
		out, err := exec.CommandContext(ctx, path, "show", "hostnames", list).Output()
		if err == nil {
			return strings.Fields(string(out)), nil
		}
	}
	return ExpandNodeList(list)
}

// ExpandNodeList expands a SLURM host list such as
// "gpu[01-03,07],login1" into its host names.
func ExpandNodeList(list string) ([]string, error) {
	var out []string
	for _, item := range splitTop(list) {
		open := strings.IndexByte(item, '[')
		if open < 0 {
			out = append(out, item)
			continue
		}
		end := strings.IndexByte(item, ']')
		if end < open {
			return nil, fmt.Errorf("node list %q: unbalanced brackets in %q", list, item)
		}
		prefix, suffix := item[:open], item[end+1:]
		for _, r := range strings.Split(item[open+1:end], ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || b < a || b-a > 100_000 {
				return nil, fmt.Errorf("node list %q: bad range %q", list, r)
			}
			for v := a; v <= b; v++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), v, suffix))
			}
		}
	}
	return out, nil
}

// splitTop splits at the commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// SelfIndex finds this node in peers: the entry whose host is this
// machine's host name (SLURMD_NODENAME first) or resolves to one of its
// interface addresses. Exactly one entry must match.
func SelfIndex(ctx context.Context, peers []string) (int, error) {
	names := map[string]bool{}
	if n := os.Getenv("SLURMD_NODENAME"); n != "" {
		names[n] = true
	}
	if h, err := os.Hostname(); err == nil {
		names[h] = true
		names[strings.SplitN(h, ".", 2)[0]] = true
	}
	local := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
				local[ipn.IP.String()] = true
			}
		}
	}
	found := -1
	for i, p := range peers {
		host, _, _ := net.SplitHostPort(p)
		match := names[host]
		if !match {
			ips, _ := net.DefaultResolver.LookupHost(ctx, host)
			for _, ip := range ips {
				match = match || local[ip]
			}
		}
		if match {
			if found >= 0 {
				return -1, fmt.Errorf("this machine is both %s and %s in --peers: give --peer-rank", peers[found], p)
			}
			found = i
		}
	}
	if found < 0 {
		return -1, fmt.Errorf("this machine is none of the %d --peers: give --peer-rank", len(peers))
	}
	return found, nil
}

// isSelf reports whether a request for host (its Host: the address the
// asker knows this node by, which the request's signature covers) is for
// this node: a restoring node's own entry in the peers; for a seed, which
// has none, an address of this machine on the port it serves.
func (n *Node) isSelf(host string) bool {
	n.mu.Lock()
	seed := n.seed != nil
	known, cached := n.localHosts[host]
	n.mu.Unlock()
	if !seed {
		return host == n.self
	}
	if cached {
		return known
	}
	h, port, err := net.SplitHostPort(host)
	_, own, _ := net.SplitHostPort(n.ln.Addr().String())
	ok := err == nil && port == own && isLocalHost(h)
	n.mu.Lock()
	if len(n.localHosts) < 1024 { // only requests signed with the key get here
		n.localHosts[host] = ok
	}
	n.mu.Unlock()
	return ok
}

// isLocalHost reports whether host names this machine: its host name, or
// an address of one of its interfaces (loopback included), or a name that
// resolves to one.
func isLocalHost(host string) bool {
	if hn, err := os.Hostname(); err == nil && (host == hn || host == strings.SplitN(hn, ".", 2)[0]) {
		return true
	}
	if host == os.Getenv("SLURMD_NODENAME") && host != "" {
		return true
	}
	local := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				local[ipn.IP.String()] = true
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, _ := net.DefaultResolver.LookupHost(ctx, host)
	for _, ip := range ips {
		if local[ip] {
			return true
		}
	}
	return false
}
