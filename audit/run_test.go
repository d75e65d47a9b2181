package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
)

// evil is model output that would run script if a page inserted it as markup.
const evil = "<script>alert(1)</script>"

// spec shapes a generated run: questions × samples × turns rollout rows per iteration,
// spread over shards, and whether response ids come from a real tokenizer.
type spec struct {
	questions, samples, turns, shards, iters int
	tokenizer                                bool
	// inject, when set, is markup that sample 1 of question 0 writes into every string
	// a model produces: each turn's memory, query, observation and response, and the answer.
	inject string
}

// makeRun writes a run under dir the way the pipelines lay it out: task/prompts, a
// checkpoint sft/ (with a tokenizer when asked), mempo/iter-k/{rollouts, scores,
// logprobs, advantages} and eval/results.md. Values are functions of (question,
// sample, turn), so tests can predict them: sample 1 of question 0 writes evil into
// its memory and response; sample s scores reward s%2; sample 2 has an invalid format.
func makeRun(t testing.TB, dir string, sp spec) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var tok *bpe.Tokenizer
	if sp.tokenizer {
		var err error
		texts := []string{"nothing found yet the founder is Alice and Paris is the city who founded Acme answer",
			evil, "<information>Doc 1(Title: Acme) Acme was founded by Alice.</information>"}
		tok, err = bpe.Train(slices.Values(texts), bpe.TrainConfig{VocabSize: 400})
		must(err)
		ckpt := filepath.Join(dir, "sft")
		must(os.MkdirAll(ckpt, 0o755))
		must(tok.Save(filepath.Join(ckpt, format.TokenizerFile)))
		b, err := os.ReadFile(filepath.Join(ckpt, format.TokenizerFile))
		must(err)
		sum := sha256.Sum256(b)
		commit := format.Commit{Format: "mempo.checkpoint", Version: 1, Stage: "sft", CacheKey: hex.EncodeToString(sum[:]),
			Files: []format.FileDigest{{File: format.TokenizerFile, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(b))}}}
		must(jobs.WriteJSON(filepath.Join(ckpt, format.CommitFile), commit))
	}
	must(os.MkdirAll(filepath.Join(dir, "task"), 0o755))
	var prompts []format.Prompt
	for q := range sp.questions {
		prompts = append(prompts, format.Prompt{UID: uid(q), DataSource: "synthetic", Split: "train",
			Question: fmt.Sprintf("Who founded Acme %d?; Where is Acme %d based?", q, q), Golds: [][]string{{"Alice", "Al"}, {"Paris"}}})
	}
	_, err := formattest.WriteDataset(filepath.Join(dir, "task", "prompts"), "gen-task", [][]format.Prompt{prompts})
	must(err)

	for it := 1; it <= sp.iters; it++ {
		g := filepath.Join(dir, "mempo", fmt.Sprintf("iter-%d", it))
		must(os.MkdirAll(g, 0o755))
		rolls := make([][]format.Rollout, sp.shards)
		scores := make([][]format.Score, sp.shards)
		lps := make([][]format.Logprob, sp.shards)
		advs := make([][]format.Advantage, sp.shards)
		for q := range sp.questions {
			sh := q * sp.shards / sp.questions // contiguous blocks of questions, as the stages shard
			for s := range sp.samples {
				answer := "Alice; Paris"
				if sp.inject != "" && q == 0 && s == 1 {
					answer = sp.inject
				}
				scores[sh] = append(scores[sh], format.Score{UID: uid(q), Sample: int32(s), Answer: answer,
					EM: []float32{1, 0}, F1: []float32{1, 0.5}, FormatOK: s != 2, Reward: float32(s % 2), TT: 100, PT: 50, Turns: int32(sp.turns)})
				for tn := range sp.turns {
					r := rollout(tok, q, s, tn, sp.turns, sp.inject)
					rolls[sh] = append(rolls[sh], r)
					l := format.Logprob{UID: r.UID, Sample: r.Sample, Turn: r.Turn, Objectives: 2}
					a := format.Advantage{UID: r.UID, Sample: r.Sample, Turn: r.Turn, Reward: float32(s % 2), AdvOutcome: float32(s) - 0.5}
					for i := range r.ResponseIDs {
						l.OldLogprobs = append(l.OldLogprobs, -0.1*float32(i+1))
						l.RefLogprobs = append(l.RefLogprobs, -0.1*float32(i+1)-0.01)
						a.Advantages = append(a.Advantages, float32(s)-0.5+0.01*float32(i))
					}
					if r.Memory != "" {
						pm, pf, pc, mg := 0.5+0.01*float32(tn), float32(0.25), float32(0.125), int32(len(goldsIn(r.Memory, prompts[q].Golds)))
						mr, am := pm-pf, float32(tn)
						l.PMem, l.PFull, l.PCtx, l.MemGolds = &pm, &pf, &pc, &mg
						a.MemReward, a.AdvMemory = &mr, &am
					}
					lps[sh] = append(lps[sh], l)
					advs[sh] = append(advs[sh], a)
				}
			}
		}
		d, err := formattest.WriteDataset(filepath.Join(g, "rollouts"), "rollout", rolls)
		must(err)
		m := d.Manifest
		m.Inputs = []format.Input{{Name: "prompts", Path: "runs/elsewhere/task/prompts", Digest: "dataset:x"},
			{Name: "policy", Path: "runs/elsewhere/sft", Digest: "checkpoint:x"}}
		m.Metrics = map[string]float64{"answered_frac": 0.75, "turns_mean": float64(sp.turns)}
		m.Timings = format.Timings{TotalS: 12.5, Phases: map[string]float64{"generate": 11, "retrieve": 1.5}}
		must(format.WriteManifest(d.Dir, m))
		_, err = formattest.WriteDataset(filepath.Join(g, "scores"), "score", scores)
		must(err)
		_, err = formattest.WriteDataset(filepath.Join(g, "logprobs"), "logprob", lps)
		must(err)
		_, err = formattest.WriteDataset(filepath.Join(g, "advantages"), "advantage", advs)
		must(err)
	}
	must(os.MkdirAll(filepath.Join(dir, "eval"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "eval", "results.md"), []byte("| policy | F1 |\n| --- | --- |\n| mempo | 0.5 |\n\nCells: mean.\n"), 0o644))
}

func ptr[T any](x T) *T { return &x }

func uid(q int) string { return fmt.Sprintf("q%05d", q) }

// memoryOf is the memory text of a turn: nothing at turn 0, then the golds found so far.
func memoryOf(q, s, tn int) string {
	switch {
	case q == 0 && s == 1 && tn == 0:
		return evil
	case tn == 0:
		return ""
	case tn == 1:
		return "the founder is alice"
	}
	return "Alice founded it; based in Paris"
}

func rollout(tok *bpe.Tokenizer, q, s, tn, turns int, inject string) format.Rollout {
	r := format.Rollout{UID: uid(q), Sample: int32(s), Turn: int32(tn), Memory: memoryOf(q, s, tn), Finish: "stop", PolicyDigest: "p"}
	query, doc, answer := "who founded Acme", "Doc 1(Title: Acme) Acme was founded by Alice.", "Alice; Paris"
	injected := inject != "" && q == 0 && s == 1
	if injected {
		r.Memory, query, doc, answer = inject, inject, inject, inject
	}
	mem := ""
	if r.Memory != "" {
		mem = "<mem>" + r.Memory + "</mem>"
	}
	rest := "<search>" + query + "</search>"
	r.Action, r.Query = "search", query
	r.Observation = "<information>" + doc + "</information>"
	if tn == turns-1 {
		rest, r.Action, r.Query, r.Observation = "<answer>"+answer+"</answer>", "answer", answer, ""
	}
	if q == 0 && s == 1 && !injected {
		rest += evil
	}
	r.Response = mem + rest
	if tok != nil {
		memIDs := tok.Encode(mem)
		r.ResponseIDs = append(memIDs, tok.Encode(rest)...)
		r.MemEnd = int32(len(memIDs))
	} else {
		n := 8 + tn
		for i := range n {
			r.ResponseIDs = append(r.ResponseIDs, int32(100+i))
		}
		if mem != "" {
			r.MemEnd = 4
		}
	}
	for i := range 24 {
		r.PromptIDs = append(r.PromptIDs, int32(i))
	}
	for i := range r.ResponseIDs {
		r.SamplingLogprobs = append(r.SamplingLogprobs, -0.1*float32(i+1)+0.001)
	}
	return r
}

// decode unmarshals an API answer.
func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %.200s: %v", body, err)
	}
	return v
}
