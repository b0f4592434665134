package peer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// authWindow is how far a request's time may be from the server's clock.
// A signed request is accepted once (its nonce is remembered for as long
// as its time is in the window), so the window bounds only the memory of
// nonces and how long a captured request is worth anything; nodes of a job
// keep their clocks closer than this with NTP.
const authWindow = time.Minute

// authScheme names the Authorization header's scheme.
const authScheme = "Ferry-HMAC2"

// KeyFromToken derives the peers' shared key from a token the scheduler
// hands every node of the job (restore --peer-token-file).
func KeyFromToken(token string) []byte {
	sum := sha256.Sum256([]byte("ferry-peer-token-v1\n" + token))
	return sum[:]
}

// KeyLabel is what a node's store credentials sign to derive the shared
// key when no token is given: every node of a job holds the same
// credentials for the same bucket and prefix, and nobody without them can
// derive it.
func KeyLabel(bucket, prefix string) string {
	return "ferry-peer-v1\n" + bucket + "\n" + prefix
}

// sign sets r's Authorization header: an HMAC-SHA256 under key of the
// method, the target node (the Host, the address the asker knows it by),
// path, query, time and a fresh nonce.
func sign(r *http.Request, key []byte, now time.Time) {
	t, nonce := strconv.FormatInt(now.Unix(), 10), newNonce()
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	r.Header.Set("Authorization", authScheme+" t="+t+",n="+nonce+",s="+mac(key, r.Method, host, r.URL.Path, r.URL.RawQuery, t, nonce))
}

func mac(key []byte, method, host, path, query, t, nonce string) string {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "ferry-peer-request-v2\n%s\n%s\n%s\n%s\n%s\n%s", method, host, path, query, t, nonce)
	return hex.EncodeToString(h.Sum(nil))
}

// errUnauthorized is all a refused request is told: why it was refused
// (a clock's skew, say) is for this node's log only.
var errUnauthorized = errors.New("not signed with the job's peer key")

// verify checks r's Authorization header: signed with key, for a host
// self accepts, within the window of now, and not seen before (seen).
// The error says why, for the log.
func verify(r *http.Request, key []byte, now time.Time, self func(host string) bool, seen *nonces) error {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), authScheme+" ")
	if !ok {
		return fmt.Errorf("%w: no %s header", errUnauthorized, authScheme)
	}
	var t, nonce, s string
	for _, kv := range strings.Split(v, ",") {
		switch k, val, _ := strings.Cut(kv, "="); k {
		case "t":
			t = val
		case "n":
			nonce = val
		case "s":
			s = val
		}
	}
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil || len(nonce) != 32 {
		return fmt.Errorf("%w: malformed", errUnauthorized)
	}
	if !hmac.Equal([]byte(s), []byte(mac(key, r.Method, r.Host, r.URL.Path, r.URL.RawQuery, t, nonce))) {
		return fmt.Errorf("%w: wrong signature", errUnauthorized)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > authWindow || d < -authWindow {
		return fmt.Errorf("%w: signed %s from this node's clock (clocks differ?)", errUnauthorized, d.Round(time.Second))
	}
	if !self(r.Host) {
		return fmt.Errorf("%w: meant for %s, not this node", errUnauthorized, r.Host)
	}
	if !seen.add(nonce, now) {
		return fmt.Errorf("%w: a replay (nonce seen before)", errUnauthorized)
	}
	return nil
}

// nonces remembers the nonces of the requests accepted in the last two
// windows or more: a request is accepted until its time is a window old,
// which is at most two windows after it first arrived.
type nonces struct {
	mu       sync.Mutex
	cur, old map[string]struct{}
	since    time.Time // when cur was started
}

// add records nonce and reports whether it is new.
func (c *nonces) add(nonce string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if age := now.Sub(c.since); c.cur == nil || age >= 2*authWindow {
		c.old, c.cur, c.since = c.cur, map[string]struct{}{}, now
		if age >= 4*authWindow {
			c.old = nil
		}
	}
	if _, ok := c.cur[nonce]; ok {
		return false
	}
	if _, ok := c.old[nonce]; ok {
		return false
	}
	c.cur[nonce] = struct{}{}
	return true
}

// planHeader carries the MAC of a plan answer.
const planHeader = "X-Ferry-Plan-MAC"

// planMAC ties a plan answer's body to the job's key, the asker's nonce
// and the node it asked (its address as the asker knows it): nobody
// without the key can answer for a node, and no answer can be replayed
// to another question or for another node.
func planMAC(key []byte, nonce, target string, body []byte) string {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "ferry-peer-plan-v1\n%s\n%s\n", nonce, target)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}
