package detect

import (
	"regexp"
	"strconv"
	"strings"
)

// What names say: temporary names that hold a step back, and the rank a
// file's path names.

// IsTempName reports whether a file or folder name is a temporary one that
// is never uploaded and keeps its step from completing: "*.tmp" (DCP's
// .metadata.tmp, most atomic writers), "*.temp", "*.partial", "*~",
// NeMo's "*-unfinished" marker, Hugging Face's "tmp-checkpoint-*" and
// Orbax's "<name>.orbax-checkpoint-tmp-<n>" folders, renamed to <name> when
// the save is done, names starting "tmp-", "tmp_", ".tmp", "temp-" or
// "temp_" (a trainer's "tmp-<pid>" folder), and the names Python's
// mkdtemp ("tmp" and six or more of [a-z0-9_]) and mktemp(1) ("tmp." and
// six or more letters and digits) make.
func IsTempName(name string) bool {
	for _, suf := range []string{".tmp", ".temp", ".partial", "~", "-unfinished"} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	for _, pre := range []string{"tmp-", "tmp_", ".tmp", "temp-", "temp_"} {
		if strings.HasPrefix(strings.ToLower(name), pre) {
			return true
		}
	}
	return mkdtempName.MatchString(name) || strings.Contains(name, orbaxTemp) || strings.Contains(name, SetAsideMark)
}

// SetAsideMark is in the name of a step folder `ferry restore
// --set-aside-newer` renamed out of a trainer's way: never a step again.
const SetAsideMark = ".ferry-set-aside-"

// mkdtempName matches Python's mkdtemp/mkstemp names and mktemp(1)'s.
var mkdtempName = regexp.MustCompile(`^tmp(?:[a-z0-9_]{6,}|\.[A-Za-z0-9]{6,})$`)

// orbaxTemp is what Orbax puts between a checkpoint's final name and a
// number while it writes it.
const orbaxTemp = ".orbax-checkpoint-tmp-"

var (
	rankDistcp  = regexp.MustCompile(`^__(\d+)_\d+\.distcp$`)
	rankZero    = regexp.MustCompile(`zero_pp_rank_(\d+)_mp_rank_(\d+)`)
	rankRNG     = regexp.MustCompile(`^rng_state_(\d+)\.pth$`)
	rankAccRNG  = regexp.MustCompile(`^random_states_(\d+)\.pkl$`)
	rankPlain   = regexp.MustCompile(`(?:^|[-_.])rank(\d+)(?:[-_.]|$)`)
	rankMegaDir = regexp.MustCompile(`^mp_rank_(\d+)$`)
)

// RankOf returns the training rank a file belongs to when its path says, or
// nil for a file shared by all ranks. The same rules serve every layout:
//
//   - "__{R}_{n}.distcp" (PyTorch DCP, Composer and Megatron sharded): R.
//   - "zero_pp_rank_{D}_mp_rank_{M}_*" (DeepSpeed ZeRO): D when M is 0, that
//     is without model parallelism; otherwise nil, since the global rank
//     depends on the topology, which the names do not give.
//   - "rng_state_{R}.pth" (Hugging Face, several processes): R.
//   - "random_states_{R}.pkl" (Accelerate's save_state: every process
//     writes its own, R its process index, rank 0 after its model,
//     optimizer and scheduler files): R.
//   - "rank{R}" as a name element ("ep0-ba100-rank3.pt"): R.
//   - a folder "mp_rank_{T}" (Megatron, tensor parallelism only): T.
//     "mp_rank_{T}_{P}" (with pipeline stages) and DeepSpeed's
//     "mp_rank_{M}_model_states.pt" (read by every data-parallel rank) give
//     nil.
func RankOf(relPath string) *int {
	elems := strings.Split(relPath, "/")
	base := elems[len(elems)-1]
	if m := rankDistcp.FindStringSubmatch(base); m != nil {
		return atoiRank(m[1])
	}
	if m := rankZero.FindStringSubmatch(base); m != nil {
		if mp, err := strconv.Atoi(m[2]); err == nil && mp == 0 {
			return atoiRank(m[1])
		}
		return nil
	}
	if m := rankRNG.FindStringSubmatch(base); m != nil {
		return atoiRank(m[1])
	}
	if m := rankAccRNG.FindStringSubmatch(base); m != nil {
		return atoiRank(m[1])
	}
	if m := rankPlain.FindStringSubmatch(base); m != nil {
		return atoiRank(m[1])
	}
	for _, dir := range elems[:len(elems)-1] {
		if m := rankMegaDir.FindStringSubmatch(dir); m != nil {
			return atoiRank(m[1])
		}
	}
	return nil
}

func atoiRank(s string) *int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<24 {
		return nil
	}
	return &n
}
