package detect

import (
	"regexp"
	"strings"

	"go.uber.org/zap"
)

// dcpLayout: PyTorch Distributed Checkpoint (torch.distributed.checkpoint)
// with FileSystemWriter, one folder per step.
//
//   - Steps are folders in the root holding "*.distcp" files or a
//     ".metadata" (or its ".metadata.tmp"). The step is the folder name's
//     trailing digits ("step_100", "step-100", "100"), or what
//     Options.StepPattern reads from the name; folders with neither are
//     skipped with a warning.
//   - Marker: ".metadata", which the coordinator writes as ".metadata.tmp"
//     and renames last, after every rank reported its writes done: proof
//     that the file set is final (ProofMarker), once it is newer than
//     every file of the folder (a save into a folder that already holds
//     a .metadata waits for the new one).
//   - Files: everything in the folder. Ranks by RankOf: "__{R}_{n}.distcp"
//     gives R; ".metadata" is shared.
//   - Pointer: none; DCP has no "latest" convention.
type dcpLayout struct {
	pattern *regexp.Regexp
	log     *zap.Logger
	warned  map[string]bool
}

var dcpTrailing = regexp.MustCompile(`(\d+)$`)

const (
	dcpMetadata    = ".metadata"
	dcpMetadataTmp = ".metadata.tmp"
)

func (*dcpLayout) Name() string { return "dcp" }

func (l *dcpLayout) stepFolder(name string) bool {
	_, ok := l.number(name)
	return ok && !IsTempName(name)
}

func (*dcpLayout) Recognize(t *Tree) bool {
	for _, e := range t.Children("") {
		if e.IsDir() && isDCPFolder(t, e.Path) {
			return true
		}
	}
	return false
}

func isDCPFolder(t *Tree, dir string) bool {
	for _, e := range t.Children(dir) {
		name := e.Name()
		if name == dcpMetadata || name == dcpMetadataTmp || strings.HasSuffix(name, ".distcp") {
			return true
		}
	}
	return false
}

func (l *dcpLayout) Steps(t *Tree) []Candidate {
	var out []Candidate
	for _, e := range t.Children("") {
		if !e.IsDir() || IsTempName(e.Name()) || !isDCPFolder(t, e.Path) {
			continue
		}
		n, ok := l.number(e.Name())
		if !ok {
			l.warnOnce(e.Path)
			continue
		}
		c := folderStep(t, e.Path, n)
		if m, ok := t.Get(e.Path + "/" + dcpMetadata); ok && m.IsRegular() {
			c.Finished, c.Proof = true, ProofMarker
			requireFresh(t, &c, m.Path, nil)
		} else {
			c.Waiting = "no " + dcpMetadata
		}
		out = append(out, c)
	}
	return out
}

func (l *dcpLayout) number(name string) (int64, bool) {
	re := dcpTrailing
	if l.pattern != nil {
		re = l.pattern
	}
	return stepFromName(re, name)
}

func (l *dcpLayout) warnOnce(dir string) {
	if l.warned == nil {
		l.warned = map[string]bool{}
	}
	if !l.warned[dir] {
		l.warned[dir] = true
		l.log.Warn("DCP folder without a step number in its name skipped; set a step pattern", zap.String("folder", dir))
	}
}

// stepFromName applies a step pattern to a name: the first group if the
// pattern has one, else the whole match, must be decimal digits.
func stepFromName(re *regexp.Regexp, name string) (int64, bool) {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	digits := m[0]
	if len(m) > 1 {
		digits = m[1]
	}
	return parseStep(digits)
}
