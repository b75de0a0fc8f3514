package wait_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed/internal/wait"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	wait.For(t, "the third call", func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("cond called %d times, want 3: once more after it held is a poll too many", calls)
	}
}

// fatal records the message a wait fails its test with, and ends the
// goroutine as testing.T's Fatalf does.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper() {}

func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWithinFailsWithTheLastSeen(t *testing.T) {
	t.Parallel()
	f := &fatal{TB: t}
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait.Within(f, 50*time.Millisecond, "the queue empty", func() error {
			calls++
			return fmt.Errorf("%d rows queued", 10-calls)
		})
		t.Error("Within returned for a condition that never held")
	}()
	<-done
	want := fmt.Sprintf("waited 50ms for the queue empty; last seen: %d rows queued", 10-calls)
	if calls < 2 || f.msg != want {
		t.Errorf("after %d calls, failed with %q, want %q", calls, f.msg, want)
	}
}

// TestNotInProduction checks that only tests and test-support packages (a
// name ending in "test", like storetest) import the package: it imports
// testing and sleeps.
func TestNotInProduction(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s is not the module root: %v", root, err)
	}
	const path = "github.com/feedhq/feed/internal/wait"
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if v, _ := strconv.Unquote(imp.Path.Value); v == path && !strings.HasSuffix(f.Name.Name, "test") {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s (package %s) imports %s, which is for tests only", rel, f.Name.Name, path)
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
