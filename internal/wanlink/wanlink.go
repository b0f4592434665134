// Package wanlink puts the internet between a client and a server on this
// machine: a toxiproxy server (Shopify's, run from its binary) in front of
// the server, with half a round-trip time added each way and a bandwidth
// cap on each TCP connection each way, as a GPU node reaching R2 sees it
// (one connection carries about window/RTT). The link can change while
// connections are open. make bench-wan and the degrading-link tests use it.
package wanlink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Link is a round-trip time and a per-connection bandwidth cap.
type Link struct {
	RTT time.Duration `json:"rtt"`
	// Rate is bytes per second per connection, each way; 0: no cap.
	Rate int64 `json:"rate_bytes_per_s"`
}

// Parse reads "RTT,RATE" ("80ms,50MB": MB are 10^6 bytes a second).
func Parse(s string) (Link, error) {
	rtt, rate, ok := strings.Cut(s, ",")
	if !ok {
		return Link{}, fmt.Errorf("link %q: want RTT,RATE per connection, for example 80ms,50MB", s)
	}
	d, err := time.ParseDuration(rtt)
	if err != nil || d < 0 {
		return Link{}, fmt.Errorf("link %q: round-trip time %q: want a duration such as 30ms", s, rtt)
	}
	mb, ok := strings.CutSuffix(strings.TrimSpace(rate), "MB")
	n, err := strconv.ParseFloat(mb, 64)
	if !ok || err != nil || n < 0 {
		return Link{}, fmt.Errorf("link %q: rate %q: want megabytes a second such as 50MB (0MB: no cap)", s, rate)
	}
	return Link{RTT: d, Rate: int64(n * 1e6)}, nil
}

func (l Link) String() string {
	limit := "no cap"
	if l.Rate > 0 {
		limit = fmt.Sprintf("%.0f MB/s per connection each way", float64(l.Rate)/1e6)
	}
	return fmt.Sprintf("RTT %v (%v each way), %s", l.RTT, l.RTT/2, limit)
}

// Proxy is a toxiproxy server with one proxy in front of a server.
type Proxy struct {
	cmd  *exec.Cmd
	api  string
	have map[string]bool // toxics in place
	// Addr is where clients connect instead of the server (host:port).
	Addr string
}

// Start starts the toxiproxy server binary bin on loopback with a proxy to
// upstream (host:port) shaped as l. TLS passes through: toxiproxy proxies
// TCP.
func Start(bin, upstream string, l Link) (*Proxy, error) {
	api, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	listen, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(api)
	p := &Proxy{api: "http://" + api, Addr: listen, have: map[string]bool{}}
	p.cmd = exec.Command(bin, "-host", host, "-port", port)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start toxiproxy: %w", err)
	}
	err = p.setUp(upstream)
	if err == nil {
		err = p.Set(l)
	}
	if err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// setUp waits for the API and creates the proxy.
func (p *Proxy) setUp(upstream string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(p.api + "/version")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("toxiproxy API did not come up: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p.call(http.MethodPost, "/proxies", map[string]any{"name": "s3", "listen": p.Addr, "upstream": upstream, "enabled": true})
}

// Set shapes the link as l from now on, connections already open included.
func (p *Proxy) Set(l Link) error {
	for _, stream := range []string{"upstream", "downstream"} {
		// toxiproxy's latency is in ms, its rate in KB/s of 1,000 bytes.
		if err := p.toxic("latency_"+stream, "latency", stream, l.RTT > 0, map[string]any{"latency": l.RTT.Milliseconds() / 2, "jitter": 0}); err != nil {
			return err
		}
		if err := p.toxic("bandwidth_"+stream, "bandwidth", stream, l.Rate > 0, map[string]any{"rate": l.Rate / 1000}); err != nil {
			return err
		}
	}
	return nil
}

// AddToxic adds a toxic of kind (timeout, reset_peer, limit_data,
// bandwidth, latency...) named name on stream (upstream: client to
// server; downstream: server to client) with toxiproxy's attributes, on
// the open connections and the new ones: the fault tests use it.
func (p *Proxy) AddToxic(name, kind, stream string, attrs map[string]any) error {
	return p.toxic(name, kind, stream, true, attrs)
}

// RemoveToxic removes the toxic name added by AddToxic.
func (p *Proxy) RemoveToxic(name string) error {
	if !p.have[name] {
		return fmt.Errorf("toxiproxy: no toxic %q to remove", name)
	}
	return p.toxic(name, "", "", false, nil)
}

// toxic creates, updates or removes one toxic.
func (p *Proxy) toxic(name, kind, stream string, want bool, attrs map[string]any) error {
	path := "/proxies/s3/toxics"
	switch {
	case want && p.have[name]:
		return p.call(http.MethodPost, path+"/"+name, map[string]any{"attributes": attrs})
	case want:
		p.have[name] = true
		return p.call(http.MethodPost, path, map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	case p.have[name]:
		delete(p.have, name)
		return p.call(http.MethodDelete, path+"/"+name, nil)
	}
	return nil
}

func (p *Proxy) call(method, path string, body any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequest(method, p.api+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("toxiproxy %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("toxiproxy %s %s: %s", method, path, resp.Status)
	}
	return nil
}

// DropConnections closes every connection through the proxy, as a link
// that flaps does: toxiproxy disables the proxy (which closes them) and
// enables it again, so clients must dial anew. The fault tests use it.
func (p *Proxy) DropConnections() error {
	for _, on := range []bool{false, true} {
		if err := p.call(http.MethodPost, "/proxies/s3", map[string]any{"enabled": on}); err != nil {
			return err
		}
	}
	return nil
}

// Pid is the toxiproxy server's process id (its CPU is the link's cost).
func (p *Proxy) Pid() int { return p.cmd.Process.Pid }

// Stop stops the toxiproxy server.
func (p *Proxy) Stop() {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// FreeAddr returns a loopback address with a port free a moment ago, for
// a server started next to listen on.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
