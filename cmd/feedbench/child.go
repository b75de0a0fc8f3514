package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a server process the benchmark starts (feedd, the Redis
// anchor): its CPU time is its own, apart from the load generator's and
// its garbage collector's in this process.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// children are the pids of the running children: the shared-machine
// sampler does not count them as other load.
var children sync.Map // pid string → struct{}

// startChild starts bin with args, its environment the benchmark's
// without any FEED_ setting (only the flags configure it) and with
// GOMAXPROCS=procs unless procs is 0. With announce, it returns the first
// line the child writes to stdout (the address it listens on), which it
// waits up to a minute for.
func startChild(name, bin string, args []string, procs int, announce bool) (*child, string, error) {
	c := &child{name: name, cmd: exec.Command(bin, args...), out: &tailBuffer{}, done: make(chan struct{})}
	c.cmd.Env = childEnv()
	if procs > 0 {
		c.cmd.Env = append(c.cmd.Env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	c.cmd.Stderr = c.out
	var stdout io.ReadCloser
	if announce {
		var err error
		if stdout, err = c.cmd.StdoutPipe(); err != nil {
			return nil, "", err
		}
	} else {
		c.cmd.Stdout = c.out
	}
	if err := c.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	children.Store(strconv.Itoa(c.cmd.Process.Pid), struct{}{})
	if !announce {
		go c.wait()
		return c, "", nil
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(c.out, stdout)
		c.wait()
	}()
	select {
	case l, ok := <-line:
		if ok {
			return c, l, nil
		}
	case <-time.After(time.Minute):
	}
	c.stop()
	return nil, "", fmt.Errorf("%s announced no address: %v\n%s", name, c.err, c.out.String())
}

func (c *child) wait() {
	c.err = c.cmd.Wait()
	children.Delete(strconv.Itoa(c.cmd.Process.Pid))
	close(c.done)
}

// childEnv is the benchmark's environment without FEED_ settings.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FEED_") {
			env = append(env, kv)
		}
	}
	return env
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited says whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// cpu is the CPU seconds the process has used so far.
func (c *child) cpu() float64 {
	s, _, err := pidCPU(c.pid())
	if err != nil {
		return 0
	}
	return s
}

// stop sends SIGTERM, waits up to half a minute for the process to end,
// then kills it; it returns an error if the process did not end cleanly.
func (c *child) stop() error {
	if c.exited() {
		return c.exitErr()
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.exitErr()
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within 30 s of SIGTERM; killed", c.name)
	}
}

func (c *child) exitErr() error {
	if c.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) && !ee.Exited() {
		return nil // ended by the signal
	}
	return fmt.Errorf("%s: %w\n%s", c.name, c.err, c.out.String())
}

// tailBuffer keeps the last 16 KiB written to it: a child's output, shown
// when it fails.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - 16<<10; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
