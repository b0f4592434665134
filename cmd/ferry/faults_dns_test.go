package main

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"golang.org/x/net/dns/dnsmessage"
)

// The endpoint's name stops resolving for a minute while the agent runs:
// for 30 s the resolver answers SERVFAIL ("server misbehaving"), for 30 s
// NXDOMAIN ("no such host"), and the connections open are dropped as the
// outage begins (else step 200 would go over those dialled for step 100
// and never ask). Step 200, saved then, must wait; once the name resolves
// again the agent commits it by itself, without a restart, and every
// warning names the host that failed to resolve and says it retries.
func TestFaultDNSOutage(t *testing.T) {
	const host = "s3.ferry.test"
	srv := s3test.Shared(t)
	dns := filepath.Join(t.TempDir(), "dns")
	r := startFaultRunAt(t, srv, srv, 0, host, envFakeDNS+"="+host+"="+dns)
	r.write(100)
	r.waitCommitted(100, time.Minute)

	setFakeDNS(t, dns, "servfail")
	if err := r.link.DropConnections(); err != nil {
		t.Fatal(err)
	}
	r.write(200)
	r.notCommittedDuring(200, 30*time.Second)
	setFakeDNS(t, dns, "nxdomain")
	r.notCommittedDuring(200, 30*time.Second)
	setFakeDNS(t, dns, "up")
	// The agent's backoff between attempts of a step has doubled to 32 s
	// or 64 s by the end of the minute.
	r.waitCommitted(200, 2*time.Minute)
	problems, all := r.finish()
	logsSay(t, problems, "lookup "+host, "server misbehaving", "host name did not resolve")
	logsSay(t, problems, "lookup "+host, "no such host", "host name did not resolve")
	saysWhatItWillDo(t, problems)
	for i, l := range problems {
		if i < 3 {
			t.Logf("logged: %s", l)
		}
		if !strings.Contains(l, host) {
			t.Errorf("a problem logged during the DNS outage does not name the host %s: %s", host, l)
		}
	}
	neverSays(t, all, "silent for")
}

// envFakeDNS, set to "host=file" in the environment of an agent a test
// runs (FERRY_CLI_MAIN=1), makes the process answer its own DNS queries:
// see fakeDNSFromEnv. Test binaries only: ferry itself never reads it.
const envFakeDNS = "FERRY_TEST_FAKE_DNS"

// fakeDNSFromEnv installs the resolver envFakeDNS asks for. host resolves
// to 127.0.0.1 while file is missing or says "up"; while it says
// "servfail" or "nxdomain", every query gets that answer. Go's own
// resolver (PreferGo) sends its queries through net.DefaultResolver's
// Dial, which every net.Dialer without a Resolver of its own uses, so the
// agent's S3 connections meet the resolver's real errors, and neither
// /etc/hosts nor /etc/resolv.conf is touched.
func fakeDNSFromEnv() {
	host, file, ok := strings.Cut(os.Getenv(envFakeDNS), "=")
	if !ok {
		return
	}
	net.DefaultResolver.PreferGo = true
	net.DefaultResolver.Dial = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go answerDNS(server, host, file) // ends when the resolver closes client
		return client, nil
	}
}

// setFakeDNS sets the answers of the resolver fakeDNSFromEnv installed.
func setFakeDNS(t *testing.T, file, mode string) {
	t.Helper()
	if err := os.WriteFile(file+".tmp", []byte(mode), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: DNS %s", time.Now().Format("15:04:05.000"), mode)
}

// answerDNS answers the queries on c, DNS over a stream (a pipe is no
// PacketConn, so the resolver frames each message with its length).
func answerDNS(c net.Conn, host, file string) {
	defer c.Close()
	for {
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		mode, _ := os.ReadFile(file)
		reply, err := dnsReply(query, host, strings.TrimSpace(string(mode)))
		if err != nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...)); err != nil {
			return
		}
	}
}

// dnsReply answers query as mode says: host's A record is 127.0.0.1, it
// has no AAAA record, and no other name exists.
func dnsReply(query []byte, host, mode string) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	switch {
	case mode == "servfail":
		rh.RCode = dnsmessage.RCodeServerFailure
	case mode == "nxdomain" || !strings.EqualFold(strings.TrimSuffix(q.Name.String(), "."), host):
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if rh.RCode == dnsmessage.RCodeSuccess && q.Type == dnsmessage.TypeA {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
		if err := b.AResource(rr, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
