package peer

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The peer port can be closed to every address but the job's nodes'
// (--peer-allow). Requests are signed anyway, so an outsider gets nothing
// from the port; but until it is refused it holds a connection, and with
// many addresses (or an IPv6 /64 per host) the slots the job's nodes need.
// A connection from an address not allowed is closed as it is accepted,
// before a byte of it is read (no TLS handshake, no request header), and
// takes no slot.

// Allowed is the set of addresses the peer port accepts connections from;
// nil accepts any address.
type Allowed []netip.Prefix

// AllowPeers is the word of an allow list that names the hosts of
// --peers, resolved when the restore starts.
const AllowPeers = "peers"

// admits reports whether a connection from addr may be accepted.
func (a Allowed) admits(addr net.Addr) bool {
	if a == nil {
		return true
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap().WithZone("")
	for _, p := range a {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// String lists the allowed prefixes, for logs.
func (a Allowed) String() string {
	s := make([]string, len(a))
	for i, p := range a {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// ParseAllow reads an allow list: comma-separated addresses (IPv4 or
// IPv6) and CIDRs, and the word "peers" (AllowPeers), reported in
// peers for the caller to resolve (ResolvePeers). An empty list is an
// error: it would refuse everyone.
func ParseAllow(spec string) (a Allowed, peers bool, err error) {
	a = Allowed{}
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case f == AllowPeers:
			peers = true
			continue
		case strings.Contains(f, "/"):
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, false, fmt.Errorf("%q: want an address, a CIDR (10.0.0.0/8, fd00::/64) or %q", f, AllowPeers)
			}
			a = append(a, netip.PrefixFrom(p.Addr().Unmap(), unmappedBits(p)).Masked())
		default:
			ip, err := netip.ParseAddr(f)
			if err != nil {
				return nil, false, fmt.Errorf("%q: want an address, a CIDR (10.0.0.0/8, fd00::/64) or %q", f, AllowPeers)
			}
			a = append(a, single(ip))
		}
	}
	if len(a) == 0 && !peers {
		return nil, false, fmt.Errorf("%q allows no address", spec)
	}
	return a, peers, nil
}

// unmappedBits is p's length once an IPv4-mapped prefix is unmapped.
func unmappedBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return max(p.Bits()-96, 0)
	}
	return p.Bits()
}

// single is the prefix of one address.
func single(ip netip.Addr) netip.Prefix {
	ip = ip.Unmap().WithZone("")
	return netip.PrefixFrom(ip, ip.BitLen())
}

// ResolvePeers returns the addresses the hosts of peers (host:port, the
// resolved --peers) have now: an address as it is, a name as the
// resolver answers it (every address it gives). A name that does not
// resolve is left out, with its error: its node cannot connect, and
// restores from the bucket.
func ResolvePeers(ctx context.Context, peers []string) (Allowed, []error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var a Allowed
	var errs []error
	seen := map[string]bool{}
	for _, p := range peers {
		host, _, err := net.SplitHostPort(p)
		if err != nil {
			host = p
		}
		if seen[host] {
			continue
		}
		seen[host] = true
		if ip, err := netip.ParseAddr(host); err == nil {
			a = append(a, single(ip))
			continue
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", host, err))
			continue
		}
		for _, ip := range ips {
			a = append(a, single(ip))
		}
	}
	return a, errs
}

// refusals logs the connections refused by the allow list: the first
// from each address (of the first 256), so a flood writes a bounded log.
type refusals struct {
	log  *zap.Logger
	mu   sync.Mutex
	seen map[string]bool
}

func (r *refusals) note(addr net.Addr) {
	host := addr.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	r.mu.Lock()
	first := !r.seen[host] && len(r.seen) < 256
	if first {
		if r.seen == nil {
			r.seen = map[string]bool{}
		}
		r.seen[host] = true
	}
	r.mu.Unlock()
	if first && r.log != nil {
		r.log.Warn("closed a peer connection from an address outside --peer-allow (logged once per address)", zap.String("remote", host))
	}
}
