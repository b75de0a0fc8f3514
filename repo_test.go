package feed_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The repository must stand alone: no file may point readers at a contract
// kept outside it. The needles are built from parts so this file does not
// contain them.
var outsideRefs = []string{
	".." + "/" + "shared",
	"shared" + "/" + "CONTRACT",
}

// skipDirs are not the repository's content: git's data, the local
// database server's files and built binaries.
var skipDirs = []string{".git", ".data", "bin"}

// TestNoOutsideReferences walks the module root and fails for every text
// file that names a path outside the repository.
func TestNoOutsideReferences(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && slices.Contains(skipDirs, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if d.Name() == ".git" {
			return nil // a worktree's link to its git directory
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if isBinary(b) {
			return nil
		}
		files++
		rel, _ := filepath.Rel(root, path)
		for _, ref := range outsideRefs {
			if i := bytes.Index(b, []byte(ref)); i >= 0 {
				line := 1 + bytes.Count(b[:i], []byte("\n"))
				t.Errorf("%s:%d refers to %q, which is outside the repository", rel, line, ref)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no files checked")
	}
}

// moduleRoot is the directory of go.mod: this package's directory, checked.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("%s is not the module root: %v", dir, err)
	}
	return dir
}

// isBinary reports whether b looks like a binary file: a NUL byte in its
// first 8000 bytes, as git decides.
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}
