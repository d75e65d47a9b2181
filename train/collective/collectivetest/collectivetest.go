// Package collectivetest starts the ranks of a test's process group: the test binary
// itself, started again world times with torchrun's variables, as a test's TestMain
// recognizes by an environment variable of its own.
package collectivetest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mempo/mempo/train/collective"
)

// Rank is how one rank ended.
type Rank struct {
	Err    error  // its exit: nil for status 0
	Stderr string // what it wrote to standard error
}

// Launch starts world ranks of the test binary, each with env (KEY=VALUE) and the
// variables torchrun sets for a rendezvous on loopback, and waits for them all; a
// rank still running after limit is killed. It skips the test when the build has no
// collective backend.
func Launch(t *testing.T, world int, limit time.Duration, env ...string) []Rank {
	t.Helper()
	if !collective.Available() {
		t.Skip("built without Gloo's headers (build/gloo.sh could not fetch them): no collective backend")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	ranks := make([]Rank, world)
	var wg sync.WaitGroup
	for r := range world {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), env...), collective.EnvAddr+"=127.0.0.1", collective.EnvPort+"="+port,
			collective.EnvRank+"="+strconv.Itoa(r), collective.EnvWorld+"="+strconv.Itoa(world))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			timer := time.AfterFunc(limit, func() { cmd.Process.Kill() })
			ranks[r].Err = cmd.Wait()
			timer.Stop()
			ranks[r].Stderr = stderr.String()
		}()
	}
	wg.Wait()
	return ranks
}

// Join joins the group torchrun's variables describe, for a rank's side of a test.
func Join(timeout time.Duration) (*collective.Group, error) {
	cfg, _, err := collective.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = timeout
	return collective.Open(cfg)
}
