package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/peer"
)

// peerTokenFlags are the ways to give the peers' shared secret: a file
// (the deploy templates' FERRY_PEER_TOKEN_FILE, a mounted secret), the
// environment, or, for compatibility, the command line, where every user
// of the machine reads it in ps.
func peerTokenFlags(with string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "peer-token-file", EnvVars: []string{"FERRY_PEER_TOKEN_FILE"},
			Usage: with + ": a `FILE` holding a secret every node of the job shares, to authenticate peers (or the secret in FERRY_PEER_TOKEN; default: derived from the store credentials)"},
		&cli.StringFlag{Name: "peer-token", Usage: with + ": the shared secret itself; it shows in ps, so prefer --peer-token-file or FERRY_PEER_TOKEN (default: none)"},
		// FERRY_PEER_TOKEN (and a --config file's line) without the flag,
		// so that --peer-token is set only from the command line.
		&cli.StringFlag{Name: "peer-token-env", EnvVars: []string{"FERRY_PEER_TOKEN"}, Hidden: true},
	}
}

// readPeerToken returns the peers' secret ("": none given), from
// --peer-token-file, --peer-token (with a warning: ps shows it) or
// FERRY_PEER_TOKEN, in that order.
func readPeerToken(c *cli.Context) (string, error) {
	file, argv := c.String("peer-token-file"), c.String("peer-token")
	if file != "" && argv != "" {
		return "", usagef("give --peer-token-file or --peer-token, not both")
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("--peer-token-file: %v", err)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", usagef("--peer-token-file %s is empty: write the job's peer secret in it", file)
		}
		return token, nil
	}
	if argv != "" {
		fmt.Fprintln(c.App.ErrWriter, "ferry: warning: --peer-token on the command line shows the secret to every user of this machine (ps); use --peer-token-file or FERRY_PEER_TOKEN")
		return argv, nil
	}
	return c.String("peer-token-env"), nil
}

// peerAllowFlag is --peer-allow: the addresses the peer port accepts
// connections from; with restore's --peers also "peers", the hosts it
// names.
func peerAllowFlag(with, what string) cli.Flag {
	return &cli.StringFlag{Name: "peer-allow", EnvVars: []string{"FERRY_PEER_ALLOW"},
		Usage: with + ": accept connections to the peer port only from `LIST`, comma-separated: " + what +
			"; others are closed before a byte is read (default: any address; every request must still be signed with the job's key)"}
}

// readPeerAllow checks --peer-allow and returns it ("" for none). peers
// says whether the command knows its peers (restore --peers): only then
// may the list name them.
func readPeerAllow(c *cli.Context, peers bool) (string, error) {
	spec := c.String("peer-allow")
	if spec == "" {
		return "", nil
	}
	_, named, err := peer.ParseAllow(spec)
	if err != nil {
		return "", usagef("--peer-allow: %v", err)
	}
	if named && !peers {
		return "", usagef("--peer-allow %s: %q is the hosts of restore's --peers; an agent's --serve-peers takes addresses and CIDRs (those of the nodes that restore from it)", spec, peer.AllowPeers)
	}
	return spec, nil
}
