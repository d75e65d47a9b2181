package collective

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sugarme/gotch"

	"github.com/mempo/mempo/model/torch"
)

// The ranks of a test group are this test binary started again with envRank set: main
// runs the named scenario as that rank (with torchrun's variables) and exits.
const (
	envRank     = "MEMPO_COLLECTIVE_TEST_RANK"
	envScenario = "MEMPO_COLLECTIVE_TEST_SCENARIO"
	envCUDA     = "MEMPO_COLLECTIVE_TEST_CUDA" // set: each rank's tensors on cuda:RANK
)

func TestMain(m *testing.M) {
	if os.Getenv(envRank) != "" {
		if err := rank(os.Getenv(envScenario)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rank runs one rank of a scenario, printing what the parent checks.
func rank(scenario string) error {
	cfg, ok, err := FromEnv(os.Getenv)
	if err != nil || !ok {
		return fmt.Errorf("FromEnv: ok %v, %v", ok, err)
	}
	cfg.Timeout = 20 * time.Second
	if scenario == "dies" || scenario == "hangs" {
		cfg.Timeout = 4 * time.Second
	}
	g, err := Open(cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	r := float32(g.Rank())
	// Each rank holds (r+1) * [1, 2, ..., 5] plus a bit that float32 sums differently
	// in another order, so the sum checks the values, not only the shape.
	vals := make([]float32, 5)
	for i := range vals {
		vals[i] = (r + 1) * float32(i+1)
	}
	dev := gotch.CPU
	if os.Getenv(envCUDA) != "" {
		dev = gotch.CudaBuilder(uint(g.Rank()))
	}
	t := torch.RawFromHost(vals, []int64{5}, dev)
	defer t.Free()
	switch scenario {
	case "dies":
		if g.Rank() == 1 {
			os.Exit(3) // before the collective: the others must fail, not wait forever
		}
	case "hangs":
		if g.Rank() == 1 {
			time.Sleep(12 * time.Second) // thrice the timeout
			return nil
		}
	}
	if err := g.AllReduce(t); err != nil {
		return err
	}
	sum := torch.ToHost[float32](t)
	b := torch.RawFromHost([]float32{r, r, r}, []int64{3}, dev)
	defer b.Free()
	if err := g.Broadcast(b, g.World()-1); err != nil {
		return err
	}
	if err := g.Barrier(); err != nil {
		return err
	}
	fmt.Printf("sum %v broadcast %v\n", sum, torch.ToHost[float32](b))
	return nil
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type result struct {
	out, stderr string
	err         error
	took        time.Duration
}

// launch starts world ranks of scenario as torchrun would and waits for them all, each
// with env (KEY=VALUE) too.
func launch(t *testing.T, scenario string, world int, env ...string) []result {
	t.Helper()
	if !Available() {
		t.Skip("built without Gloo's headers (build/gloo.sh could not fetch them): no collective backend")
	}
	port := freePort(t)
	cmds := make([]*exec.Cmd, world)
	outs := make([]*bytes.Buffer, world)
	errs := make([]*bytes.Buffer, world)
	start := time.Now()
	for r := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envRank+"=1", envScenario+"="+scenario,
			EnvAddr+"=127.0.0.1", EnvPort+"="+strconv.Itoa(port), EnvRank+"="+strconv.Itoa(r), EnvWorld+"="+strconv.Itoa(world))
		cmd.Env = append(cmd.Env, env...)
		outs[r], errs[r] = new(bytes.Buffer), new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], errs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	res := make([]result, world)
	var wg sync.WaitGroup
	for r, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
			err := cmd.Wait()
			timer.Stop()
			res[r] = result{out: outs[r].String(), stderr: errs[r].String(), err: err, took: time.Since(start)}
		}()
	}
	wg.Wait()
	return res
}

// TestCollectives: two and three processes rendezvous through the TCPStore and sum,
// broadcast and wait through Gloo; every rank gets the same, exact, results.
func TestCollectives(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world %d", world), func(t *testing.T) {
			checkSums(t, launch(t, "sum", world), world)
		})
	}
}

// checkSums checks every rank printed the "sum" scenario's exact results for world.
func checkSums(t *testing.T, res []result, world int) {
	t.Helper()
	// sum over ranks of (r+1) * i = i * world(world+1)/2
	k := float32(world * (world + 1) / 2)
	want := fmt.Sprintf("sum %v broadcast %v\n", []float32{k, 2 * k, 3 * k, 4 * k, 5 * k},
		[]float32{float32(world - 1), float32(world - 1), float32(world - 1)})
	for r, res := range res {
		if res.err != nil {
			t.Fatalf("rank %d: %v\n%s", r, res.err, res.stderr)
		}
		if res.out != want {
			t.Errorf("rank %d printed %q, want %q", r, res.out, want)
		}
	}
}

// TestCUDA: the "sum" scenario on CUDA tensors goes through NCCL, one rank a GPU (two
// ranks where two GPUs are visible, else one); skipped without a GPU.
func TestCUDA(t *testing.T) {
	if !torch.CUDABuilt() || gotch.CUDA.DeviceCount() == 0 {
		t.Skip("no CUDA device")
	}
	world := min(int(gotch.CUDA.DeviceCount()), 2)
	checkSums(t, launch(t, "sum", world, envCUDA+"=1"), world)
}

// TestNCCL: a CUDA build finds NCCL's functions in the process (libtorch_cuda loads
// them); a CPU build says it has none.
func TestNCCL(t *testing.T) {
	if !Available() {
		t.Skip("built without Gloo's headers: no collective backend")
	}
	err := NCCL()
	if torch.CUDABuilt() {
		if err != nil {
			t.Fatalf("a CUDA build without NCCL: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "ncclAllReduce") {
		t.Fatalf("NCCL() in a CPU build = %v, want the missing functions named", err)
	}
}

// TestRankFailure: a rank that exits or hangs before a collective makes the others'
// collective fail within the timeout, with their rank and host in the error.
func TestRankFailure(t *testing.T) {
	host, _ := os.Hostname()
	for _, scenario := range []string{"dies", "hangs"} {
		t.Run(scenario, func(t *testing.T) {
			res := launch(t, scenario, 3)
			for _, r := range []int{0, 2} {
				if res[r].err == nil {
					t.Fatalf("rank %d succeeded without rank 1: %s", r, res[r].out)
				}
				msg := res[r].stderr
				t.Logf("rank %d after %v: %s", r, res[r].took.Round(time.Millisecond), msg)
				for _, want := range []string{fmt.Sprintf("rank %d of 3 on %s", r, host), "timeout 4s", ErrFailed.Error()} {
					if !strings.Contains(msg, want) {
						t.Errorf("rank %d's error %q lacks %q", r, msg, want)
					}
				}
				// The timeout is 4 s, rank 1 hangs for 12.
				if res[r].took > 11*time.Second {
					t.Errorf("rank %d failed after %v", r, res[r].took)
				}
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	if _, ok, err := FromEnv(env()); ok || err != nil {
		t.Errorf("FromEnv(no WORLD_SIZE) = ok %v, %v; want not ok", ok, err)
	}
	cfg, ok, err := FromEnv(env(EnvWorld, "4", EnvRank, "3", EnvAddr, "node0", EnvIface, "eth1", EnvLocal, "1"))
	if want := (Config{Addr: "node0", Port: 29500, Rank: 3, World: 4, Iface: "eth1", LocalRank: 1}); !ok || err != nil || cfg != want {
		t.Errorf("FromEnv = %+v, %v, %v; want %+v", cfg, ok, err, want)
	}
	for _, bad := range [][]string{
		{EnvWorld, "2", EnvRank, "2", EnvAddr, "a"},
		{EnvWorld, "2", EnvRank, "-1", EnvAddr, "a"},
		{EnvWorld, "2", EnvRank, "x", EnvAddr, "a"},
		{EnvWorld, "2", EnvRank, "1"},
		{EnvWorld, "0", EnvRank, "0"},
		{EnvWorld, "2", EnvRank, "0", EnvAddr, "a", EnvPort, "70000"},
		{EnvWorld, "2", EnvRank, "0", EnvAddr, "a", EnvLocal, "-1"},
	} {
		if _, _, err := FromEnv(env(bad...)); !errors.Is(err, ErrConfig) {
			t.Errorf("FromEnv(%q) = %v, want ErrConfig", bad, err)
		}
	}
}
