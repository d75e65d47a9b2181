package audit

import (
	"os"
	"sync"
	"testing"
)

// benchSpec is a run of 2000 questions × 8 samples × 6 turns = 96k rollout rows (and
// as many log-prob and advantage rows) in 16 shards per dataset.
var benchSpec = spec{questions: 2000, samples: 8, turns: 6, shards: 16, iters: 1}

var benchRun struct {
	once sync.Once
	dir  string
}

// bigRun returns the generated run, made once per process (about 10 s).
func bigRun(b *testing.B) string {
	b.Helper()
	benchRun.once.Do(func() {
		dir, err := os.MkdirTemp("", "view-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchRun.dir = dir
		makeRun(b, dir, benchSpec)
	})
	if benchRun.dir == "" {
		b.Fatal("no benchmark run")
	}
	return benchRun.dir
}

// BenchmarkOpenRun: the overview of a run of 96k rollout rows: walking it, reading
// every manifest and commit record and stating every shard, from a fresh viewer.
func BenchmarkOpenRun(b *testing.B) {
	dir := bigRun(b)
	for b.Loop() {
		v, err := New(Config{Run: dir}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		if code, _, body := get(nil, v, "/api/run"); code != 200 {
			b.Fatalf("GET /api/run = %d %s", code, body)
		}
	}
}

// BenchmarkQuestionPage: one question's page (rollouts, scores, log-probs, advantages
// and prompts of one uid) in the 96k-row run. cold: a fresh viewer, so the uid
// indexes are built and the four shards decoded; warm: a question of an already
// decoded shard.
func BenchmarkQuestionPage(b *testing.B) {
	dir := bigRun(b)
	page := func(v *Server, q int) {
		if code, _, body := get(nil, v, "/api/question?group=mempo%2Fiter-1&uid="+uid(q)); code != 200 {
			b.Fatalf("GET question %s = %d %.300s", uid(q), code, body)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			v, err := New(Config{Run: dir}, quiet)
			if err != nil {
				b.Fatal(err)
			}
			page(v, 1000)
		}
	})
	b.Run("warm", func(b *testing.B) {
		v, err := New(Config{Run: dir}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		page(v, 1000)
		i := 0
		for b.Loop() {
			page(v, 1000+i%100) // 100 questions of the same shard
			i++
		}
	})
}
