package train

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// TestOptimizerFileRoundTrip saves an optimizer after two steps and loads the file into
// a fresh one over equal parameters: the next step must match bit for bit.
func TestOptimizerFileRoundTrip(t *testing.T) {
	checkLeaks(t)
	grads := [][]float64{{0.3, -0.1, 0.7, 0.2}, {-0.5, 0.4, 0.1, 0.9}, {0.2, 0.2, -0.3, 0.05}}
	newParam := func(v []float64) Param {
		w := tensorOf(t, v, []int64{2, 2}, gotch.Float)
		return Param{Name: "w", T: torch.Must(w.SetRequiresGrad(true, true))}
	}
	step := func(o *AdamW, p Param, g []float64) {
		setGrad(t, p.T, g)
		if _, err := o.Step(); err != nil {
			t.Fatal(err)
		}
		if err := o.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultAdamW
	cfg.LR = 0.01
	pa := newParam([]float64{0.5, -1, 2, 0.25})
	defer torch.Drop(pa.T)
	a, err := NewAdamW([]Param{pa}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Drop()
	step(a, pa, grads[0])
	step(a, pa, grads[1])
	path := filepath.Join(t.TempDir(), OptimizerFile)
	if err := SaveOptimizer(path, a); err != nil {
		t.Fatal(err)
	}
	// b continues from a's weights and the saved state.
	pb := newParam(torch.Values(pa.T))
	defer torch.Drop(pb.T)
	b, err := NewAdamW([]Param{pb}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Drop()
	if err := LoadOptimizer(path, b); err != nil {
		t.Fatal(err)
	}
	if b.Steps() != 2 {
		t.Errorf("loaded optimizer at step %d, want 2", b.Steps())
	}
	step(a, pa, grads[2])
	step(b, pb, grads[2])
	if got, want := torch.Values(pb.T), torch.Values(pa.T); !equalBits(got, want) {
		t.Errorf("after a loaded step: %v, uninterrupted %v", got, want)
	}

	other := Param{Name: "v", T: tensorOf(t, []float64{1, 2, 3, 4}, []int64{2, 2}, gotch.Float)}
	defer torch.Drop(other.T)
	c, err := NewAdamW([]Param{other}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Drop()
	if err := LoadOptimizer(path, c); !errors.Is(err, ErrInput) {
		t.Errorf("LoadOptimizer into another model = %v, want ErrInput", err)
	}
}

func equalBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestArtifact publishes a checkpoint and checks the commit record is the cache hit,
// that a foreign or unfinished directory is not, and that the lock keeps a second
// writer out.
func TestArtifact(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ckpt")
	key := jobs.Key{1, 2, 3}
	a, hit, err := Begin(out, key, false, nil)
	if err != nil || hit != nil {
		t.Fatalf("Begin = %v, %v; want a fresh artifact", hit, err)
	}
	if _, _, err := Begin(out, key, false, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("second Begin while locked = %v, want ErrLocked", err)
	}
	if err := os.WriteFile(filepath.Join(a.Tmp, "config.json"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCommit(a.Tmp); !errors.Is(err, ErrNotCheckpoint) {
		t.Errorf("ReadCommit of an unfinished dir = %v, want ErrNotCheckpoint", err)
	}
	if err := a.Publish(Commit{Stage: "test", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	a.Release()
	c, err := ReadCommit(out)
	if err != nil || c.CacheKey != key.String() || len(c.Files) != 1 || c.Files[0].File != "config.json" {
		t.Fatalf("ReadCommit = %+v, %v; want the key and config.json", c, err)
	}
	if _, hit, err := Begin(out, key, false, nil); err != nil || hit == nil {
		t.Errorf("Begin after publish = %v, %v; want a cache hit", hit, err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), []byte("{\"x\": 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, hit, err := Begin(out, key, false, nil)
	if err != nil || hit != nil {
		t.Fatalf("Begin after a file changed size = %v, %v; want a miss", hit, err)
	}
	b.Release()
}
