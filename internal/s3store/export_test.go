package s3store

import (
	"context"
	"net"
	"time"
)

// WithDial makes cfg's connections dial through dial (a resolver that
// fails for a while).
func WithDial(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) Config {
	cfg.dial = dial
	return cfg
}

// WithClockOffset makes cfg sign requests as a host whose clock is off by d.
func WithClockOffset(cfg Config, d time.Duration) Config {
	cfg.clockOffset = d
	return cfg
}
