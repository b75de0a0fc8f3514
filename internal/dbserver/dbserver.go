// Package dbserver starts throwaway mariadbd servers, each with its own data
// directory and port, so that a test or a benchmark may lock, stop or kill
// one without touching any other server. store/storetest wraps it for
// tests; cmd/feedbench starts its servers with it directly.
package dbserver

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver the readiness check pings with
)

// Server is one running mariadbd.
type Server struct {
	// DSN reaches the server as root, with no database name.
	DSN  string
	Port int
	cmd  *exec.Cmd
	// exited is closed once cmd has ended and been waited for.
	exited chan struct{}
	bin    string
	args   []string
	dir    string
}

// Launch starts a mariadbd of its own in dir (which must be empty or
// missing; its data directory is a copy of an initialised one) on a free
// port, reading the option files defaults names (its first option), then
// the options every such server gets, then extra, and waits until it
// answers, or kills it and returns why it did not. The caller kills it.
func Launch(dir, defaults string, extra ...string) (*Server, error) {
	mariadbd, err := findBinary("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	template, err := serverTemplate(mariadbd)
	if err != nil {
		return nil, err
	}
	// Temporary tables go in the server's own directory: in a shared /tmp,
	// whatever cleans it up takes them from under the server.
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.Command("cp", "-a", template, data).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copy the initialised data directory: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	srv := &Server{Port: port, DSN: fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)}
	srvArgs := []string{defaults, "--datadir=" + data, "--tmpdir=" + tmp, "--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "sock"), "--skip-name-resolve",
		"--log-error=" + filepath.Join(dir, errorLogFile)}
	if os.Geteuid() == 0 {
		srvArgs = append(srvArgs, "--user=root")
	}
	srv.bin, srv.args, srv.dir = mariadbd, append(srvArgs, extra...), dir
	if err := srv.start(); err != nil {
		srv.Kill()
		return nil, err
	}
	return srv, nil
}

// start runs mariadbd on the server's data directory and waits until it
// answers.
func (s *Server) start() error {
	s.cmd = exec.Command(s.bin, s.args...)
	var stderr bytes.Buffer
	s.cmd.Stderr = &stderr
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func() { _ = s.cmd.Wait(); close(exited) }()
	db, err := sql.Open("mysql", s.DSN+"?timeout=1s")
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			// A plugin that fails to start (the inbox's engine) leaves the
			// server up without it: a failed start, with the log to say why.
			if log := s.errorLog(); bytes.Contains(log, []byte("init function returned error")) {
				return fmt.Errorf("mariadbd on port %d started without a plugin:\n%s", s.Port, log)
			}
			return nil
		}
		// A server that refuses its options (a missing plugin) exits at
		// once: say so then, not after the whole wait.
		select {
		case <-exited:
			return fmt.Errorf("mariadbd on port %d exited while starting: %s\n%s%s", s.Port, s.cmd.ProcessState, stderr.String(), s.errorLog())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd on port %d did not answer within 60 s: %v\n%s%s", s.Port, err, stderr.String(), s.errorLog())
		}
	}
}

// errorLogFile is the server's log, in its directory.
const errorLogFile = "error.log"

// errorLog returns what the server has logged so far, for a failed start's
// message.
func (s *Server) errorLog() []byte {
	log, _ := os.ReadFile(filepath.Join(s.dir, errorLogFile))
	return log
}

// Kill ends the server at once (SIGKILL), as a crashed host.
func (s *Server) Kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Restart starts a killed server again on the same data and port.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}

// Stop freezes the server (SIGSTOP): connections stay open and nothing
// answers, as on a hung host.
func (s *Server) Stop() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume undoes Stop.
func (s *Server) Resume() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

// serverTemplate initialises one data directory per process, which every
// server it launches copies: faster than mariadb-install-db per server,
// and the bootstrap is run once, not concurrently.
func serverTemplate(mariadbd string) (string, error) {
	templateOnce.Do(func() {
		installDB, err := findBinary("mariadb-install-db", "mysql_install_db")
		if err != nil {
			templateErr = err
			return
		}
		dir, err := os.MkdirTemp("", "feed-mariadb-template-")
		if err != nil {
			templateErr = err
			return
		}
		templateDir = filepath.Join(dir, "data")
		// A server deletes the #sql files in its tmpdir as it starts, which
		// in the shared /tmp are other servers' temporary tables in use.
		args := []string{"--no-defaults", "--datadir=" + templateDir, "--tmpdir=" + dir, "--auth-root-authentication-method=normal", "--skip-test-db"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		if filepath.Dir(mariadbd) == "/usr/sbin" {
			args = append(args, "--basedir=/usr")
		}
		if out, err := exec.Command(installDB, args...).CombinedOutput(); err != nil {
			templateErr = fmt.Errorf("%s: %v\n%s", installDB, err, out)
		}
	})
	return templateDir, templateErr
}

// RemoveTemplate deletes the initialised data directory; a process that
// launched servers calls it once it launches no more (a TestMain after
// m.Run).
func RemoveTemplate() {
	if templateDir != "" {
		_ = os.RemoveAll(filepath.Dir(templateDir))
	}
}

func findBinary(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
			if p := filepath.Join(dir, n); isExecutable(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("none of %v is installed (Debian: apt-get install mariadb-server)", names)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// freePort asks the kernel for a port no one listens on.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
