package detect

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"go.uber.org/zap"
)

// Gather returns the step `ferry push` uploads from sources, in the shape
// the watcher reports steps: every regular file under one directory (paths
// relative to it), or the regular files named, each recorded under its
// base name. Symbolic links in a directory are judged as the watcher judges
// them: kept when they resolve inside it (an absolute target is rewritten
// relative to the link), skipped with a warning otherwise; special files
// are skipped with a warning. Ranks come from file names (RankOf). Number
// is left 0 for the caller. skipped lists what was left out and why.
func Gather(sources []string, log *zap.Logger) (s Step, skipped []string, err error) {
	if log == nil {
		log = zap.NewNop()
	}
	if len(sources) == 0 {
		return Step{}, nil, fmt.Errorf("nothing to push: name a checkpoint directory or files")
	}
	if len(sources) == 1 {
		fi, err := os.Stat(sources[0])
		if err != nil {
			return Step{}, nil, fmt.Errorf("push source: %w", err)
		}
		if fi.IsDir() {
			return gatherDir(sources[0], log)
		}
	}
	seen := map[string]string{}
	for _, src := range sources {
		fi, err := os.Stat(src)
		if err != nil {
			return Step{}, nil, fmt.Errorf("push source: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return Step{}, nil, fmt.Errorf("push source %s: not a regular file (push one directory, or files)", src)
		}
		name := filepath.Base(src)
		if prev, dup := seen[name]; dup {
			return Step{}, nil, fmt.Errorf("push sources %s and %s have the same name %q", prev, src, name)
		}
		seen[name] = src
		id, _ := idOf(fi)
		s.Files = append(s.Files, File{RelPath: name, LocalPath: src, Size: fi.Size(), ModTime: fi.ModTime(), Dev: id.dev, Ino: id.ino, Rank: RankOf(name)})
	}
	sortStep(&s)
	return s, nil, nil
}

// gatherDir lists the directory once with the watcher's tree and takes
// everything in it.
func gatherDir(dir string, log *zap.Logger) (Step, []string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Step{}, nil, fmt.Errorf("push source %s: %w", dir, err)
	}
	e := &engine{log: log, tree: newTree(abs), warned: map[string]bool{}}
	if err := e.rescan(nil); err != nil {
		return Step{}, nil, fmt.Errorf("push source: %w", err)
	}
	s := Step{Dir: abs}
	var skipped []string
	var walkErr error
	e.tree.Walk("", func(en Entry) {
		switch {
		case walkErr != nil:
		case en.Err != nil:
			walkErr = fmt.Errorf("push source %s: %w", e.tree.abs(en.Path), en.Err)
		case en.IsDir():
		case en.IsRegular():
			s.Files = append(s.Files, File{RelPath: en.Path, LocalPath: e.tree.abs(en.Path), Size: en.Size, ModTime: en.ModTime,
				Dev: en.id.dev, Ino: en.id.ino, Rank: en.Rank()})
		case en.IsSymlink():
			if l, ok := e.checkLink(Symlink{RelPath: en.Path, Target: en.Target}); ok {
				s.Symlinks = append(s.Symlinks, l)
			} else {
				skipped = append(skipped, en.Path+" -> "+en.Target)
			}
		default:
			log.Warn("skipping special file", zap.String("path", en.Path))
			skipped = append(skipped, en.Path+": not a regular file")
		}
	})
	if walkErr != nil {
		return Step{}, nil, walkErr
	}
	sortStep(&s)
	sort.Strings(skipped)
	return s, skipped, nil
}
