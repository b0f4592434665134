package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// generated is Go's marker of a generated file (go help generate).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// check returns one line per offender under roots, sorted, leaving out
// those in allow; an allow entry that names no offender is an offence too.
func check(roots []string, allow map[string]string) ([]string, error) {
	var files []string
	for _, root := range roots {
		found, err := goFiles(root)
		if err != nil {
			return nil, err
		}
		files = append(files, found...)
	}
	slices.Sort(files)
	files = slices.Compact(files)
	var out []string
	seen := map[string]bool{}
	for _, f := range files {
		offences, err := checkFile(f)
		if err != nil {
			return nil, err
		}
		for _, o := range offences {
			if _, ok := allow[o.key]; ok {
				seen[o.key] = true
				continue
			}
			out = append(out, o.text)
		}
	}
	for key, why := range allow {
		if !seen[key] {
			out = append(out, fmt.Sprintf("%s: allowed (%s) but within the limits now: remove it from the allow list", key, why))
		}
	}
	slices.Sort(out)
	return out, nil
}

// goFiles lists the non-test .go files of root, a file or a folder.
func goFiles(root string) ([]string, error) {
	info, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		// A relative path's folders are those a walk of . would see.
		path := filepath.Clean(root)
		for _, dir := range strings.Split(filepath.Dir(path), string(filepath.Separator)) {
			if !filepath.IsAbs(path) && skipDir(dir) {
				return nil, nil
			}
		}
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && skipDir(name) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, filepath.Clean(path))
		}
		return nil
	})
	return files, err
}

// skipDir reports whether Go leaves the folder name out of ./... (and so
// does this check); "." and ".." are not left out.
func skipDir(name string) bool {
	if name == "." || name == ".." {
		return false
	}
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// offence is one function or file over its limit: key for the allow list,
// text for the report.
type offence struct{ key, text string }

// checkFile measures one file and each function in it.
func checkFile(path string) ([]offence, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, "_test.go") || generated.Match(src) {
		return nil, nil
	}
	var out []offence
	if n := utf8.RuneCount(src); n > maxFileChars {
		out = append(out, offence{path, fmt.Sprintf("%s: %d characters (limit %d)", path, n, maxFileChars)})
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	lines := func(n ast.Node) (first, count int) {
		first = fset.Position(n.Pos()).Line
		return first, fset.Position(n.End()).Line - first + 1
	}
	ast.Inspect(file, func(n ast.Node) bool {
		var name string
		switch n := n.(type) {
		case *ast.FuncDecl:
			name = funcName(n)
		case *ast.FuncLit:
			name = "func literal" // outside any function: a package-level var
		default:
			return true
		}
		if first, count := lines(n); count > maxFuncLines {
			key := path + ":" + name
			out = append(out, offence{key, fmt.Sprintf("%s:%d: %s is %d lines (limit %d)", path, first, name, count, maxFuncLines)})
		}
		return false // a literal inside a function is within its lines
	})
	return out, nil
}

// funcName is a declaration's name, with its receiver's type: (*T).M.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	var b bytes.Buffer
	t := fd.Recv.List[0].Type
	star := false
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = true, s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr: // a generic receiver T[P]
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, _ := t.(*ast.Ident)
	recv := "?"
	if id != nil {
		recv = id.Name
	}
	if star {
		fmt.Fprintf(&b, "(*%s).%s", recv, fd.Name.Name)
	} else {
		fmt.Fprintf(&b, "%s.%s", recv, fd.Name.Name)
	}
	return b.String()
}
