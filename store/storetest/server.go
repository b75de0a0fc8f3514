package storetest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/feedhq/feed/internal/dbserver"
	"github.com/feedhq/feed/store"
)

// Server is a throwaway mariadbd of one test (internal/dbserver): its own
// data directory and port, so a test may lock, stop or kill it without
// touching other tests.
type Server struct {
	*dbserver.Server
}

// StartServer initialises and starts a mariadbd with a small buffer pool,
// stopped when the test ends, able to hold the tests' inbox engine
// (EnvEngine). The test fails if mariadbd is not installed: a test that
// cannot reach a database must never pass.
func StartServer(t testing.TB) *Server {
	t.Helper()
	if InboxEngine(t) == store.RocksDB {
		return StartRocksDBServer(t)
	}
	return StartPlainServer(t)
}

// StartPlainServer is StartServer with no option file and no binary log,
// then the extra options.
func StartPlainServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startServer(t, "--no-defaults", append([]string{"--skip-log-bin"}, extra...))
}

// StartRocksDBServer is StartPlainServer with the options of deploy/rocksdb.cnf
// (MyRocks and the inbox's column family) and a small block cache. The
// test fails if the plugin is not installed (mariadb-plugin-rocksdb).
func StartRocksDBServer(t testing.TB) *Server {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return startServer(t, "--defaults-file="+filepath.Join(root, "deploy", "rocksdb.cnf"), []string{"--rocksdb-block-cache-size=64M"})
}

// ModuleRoot walks up from the working directory (the package's, under go
// test) to the directory holding go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// startServer starts mariadbd with defaults, the first option (which
// option files to read), then the test server's options, then extra.
func startServer(t testing.TB, defaults string, extra []string) *Server {
	t.Helper()
	srv, err := dbserver.Launch(t.TempDir(), defaults, append([]string{"--innodb-buffer-pool-size=64M",
		"--innodb-log-file-size=48M", "--max-connections=300"}, extra...)...)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() {
		srv.Resume()
		srv.Kill()
	})
	return &Server{srv}
}

// Restart starts a killed server again on the same data and port; the test
// fails if it does not answer.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Server.Restart(); err != nil {
		t.Fatalf("storetest: %v", err)
	}
}
