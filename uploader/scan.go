package uploader

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/manifest"
)

// LocalFile is a regular file found by Scan.
type LocalFile struct {
	LocalPath string
	RelPath   string // slash-separated, relative to the scanned root
	Size      int64
}

// Tree is what Scan found: regular files and symlinks that stay inside the
// root, sorted by path.
type Tree struct {
	Files    []LocalFile
	Symlinks []manifest.Symlink
	// Skipped lists what was left out and why (links leaving the root,
	// special files).
	Skipped []string
}

// Scan walks sources for a push. A single directory is pushed as the
// checkpoint root (paths relative to it); otherwise each source must be a
// regular file and is recorded under its base name. Symbolic links inside a
// directory that resolve inside it are recorded as links; others, and
// special files, are skipped with a warning. Links are never followed.
func Scan(sources []string, log *zap.Logger) (Tree, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if len(sources) == 0 {
		return Tree{}, fmt.Errorf("nothing to push: name a checkpoint directory or files")
	}
	if len(sources) == 1 {
		fi, err := os.Stat(sources[0])
		if err != nil {
			return Tree{}, fmt.Errorf("push source: %w", err)
		}
		if fi.IsDir() {
			return scanDir(sources[0], log)
		}
	}
	var t Tree
	seen := map[string]string{}
	for _, src := range sources {
		fi, err := os.Stat(src)
		if err != nil {
			return Tree{}, fmt.Errorf("push source: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return Tree{}, fmt.Errorf("push source %s: not a regular file (push one directory, or files)", src)
		}
		name := filepath.Base(src)
		if prev, dup := seen[name]; dup {
			return Tree{}, fmt.Errorf("push sources %s and %s have the same name %q", prev, src, name)
		}
		seen[name] = src
		t.Files = append(t.Files, LocalFile{LocalPath: src, RelPath: name, Size: fi.Size()})
	}
	sort.Slice(t.Files, func(i, j int) bool { return t.Files[i].RelPath < t.Files[j].RelPath })
	return t, nil
}

func scanDir(root string, log *zap.Logger) (Tree, error) {
	var t Tree
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return Tree{}, fmt.Errorf("resolve %s: %w", root, err)
	}
	err = filepath.WalkDir(realRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("scan %s: %w", p, err)
		}
		if p == realRoot {
			return nil
		}
		rel, err := filepath.Rel(realRoot, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch mode := d.Type(); {
		case mode.IsDir():
			return nil
		case mode.IsRegular():
			info, err := d.Info()
			if err != nil {
				return fmt.Errorf("scan %s: %w", p, err)
			}
			t.Files = append(t.Files, LocalFile{LocalPath: p, RelPath: rel, Size: info.Size()})
		case mode&fs.ModeSymlink != 0:
			target, ok, why := InsideLink(realRoot, p, rel)
			if !ok {
				log.Warn("skipping symbolic link", zap.String("path", rel), zap.String("reason", why))
				t.Skipped = append(t.Skipped, rel+": "+why)
				return nil
			}
			t.Symlinks = append(t.Symlinks, manifest.Symlink{Path: rel, Target: target})
		default:
			log.Warn("skipping special file", zap.String("path", rel))
			t.Skipped = append(t.Skipped, rel+": not a regular file")
		}
		return nil
	})
	if err != nil {
		return Tree{}, err
	}
	return t, nil
}

// InsideLink reads the symlink at p (rel is its path relative to root) and
// reports its target, relative to the link's directory, when the link
// resolves inside root; otherwise it gives the reason to skip it.
func InsideLink(root, p, rel string) (string, bool, string) {
	target, err := os.Readlink(p)
	if err != nil {
		return "", false, "unreadable: " + err.Error()
	}
	abs := target
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(filepath.Dir(p), target)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", false, "dangling or unresolvable target " + target
	}
	inside, err := filepath.Rel(root, resolved)
	if err != nil || inside == "." || inside == ".." || strings.HasPrefix(inside, "../") {
		return "", false, "target " + target + " is outside the checkpoint"
	}
	// Record the target relative to the link's directory, so the link is
	// recreated correctly wherever the checkpoint is restored.
	relTarget := path.Clean(filepath.ToSlash(target))
	if filepath.IsAbs(target) {
		rt, err := filepath.Rel(filepath.Dir(p), resolved)
		if err != nil {
			return "", false, "cannot express target " + target + " relatively"
		}
		relTarget = filepath.ToSlash(rt)
	}
	if resolvedLex := path.Join(path.Dir(rel), relTarget); resolvedLex == "." || resolvedLex == ".." || strings.HasPrefix(resolvedLex, "../") {
		return "", false, "target " + target + " leaves the checkpoint before coming back"
	}
	return relTarget, true, ""
}
