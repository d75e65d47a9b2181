package score

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// Stage is the score stage's name in cache keys and manifests.
const Stage = "score"

// Inputs are the datasets the score stage reads.
type Inputs struct {
	Rollouts string // rollouts dataset
	Prompts  string // prompts dataset holding the golds
}

// Run scores every trajectory of the rollouts into a scores dataset, one shard per
// rollouts shard (a GRPO group never spans shards), rows sorted by (uid, sample).
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec) (*jobs.Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rolls, err := format.OpenDataset(in.Rollouts)
	if err != nil {
		return nil, fmt.Errorf("score: rollouts: %w", err)
	}
	golds, err := readGolds(in.Prompts)
	if err != nil {
		return nil, fmt.Errorf("score: prompts: %w", err)
	}
	spec.Inputs = nil
	for _, d := range []struct{ name, dir string }{{"rollouts", in.Rollouts}, {"prompts", in.Prompts}} {
		input, err := jobs.DatasetInput(d.name, d.dir)
		if err != nil {
			return nil, fmt.Errorf("score: %w", err)
		}
		spec.Inputs = append(spec.Inputs, input)
	}
	spec.Stage, spec.Kind, spec.SchemaVersion = Stage, format.KindScores, format.ScoresVersion
	spec.Config, spec.Shards = cfg, rolls.Len()
	spec.Summarize = summarize
	return jobs.Run(ctx, spec, func(ctx context.Context, w *jobs.Work) error {
		return scoreShard(cfg, rolls, w, golds)
	})
}

// summarize is the manifest's summary of the scores: per trajectory, the mean reward,
// EM and F1 (each over its objectives), the share of well-formed trajectories, and the
// mean turns, total tokens and peak context.
func summarize(dir string, outputs []format.Output) (map[string]float64, error) {
	var n, reward, em, f1, ok, turns, tt, pt float64
	for _, o := range outputs {
		r, err := format.OpenFile[format.Score](filepath.Join(dir, o.File))
		if err != nil {
			return nil, err
		}
		rows, err := format.ReadAll(r)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			n++
			reward += float64(r.Reward)
			em += mean(r.EM)
			f1 += mean(r.F1)
			if r.FormatOK {
				ok++
			}
			turns += float64(r.Turns)
			tt += float64(r.TT)
			pt += float64(r.PT)
		}
	}
	if n == 0 {
		return map[string]float64{"trajectories": 0}, nil
	}
	return map[string]float64{"trajectories": n, "reward_mean": reward / n, "em_mean": em / n, "f1_mean": f1 / n,
		"format_ok_rate": ok / n, "turns_mean": turns / n, "tt_mean": tt / n, "pt_mean": pt / n}, nil
}

func mean(xs []float32) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(len(xs))
}

// readGolds maps each prompt's uid to its golds.
func readGolds(dir string) (map[string][][]string, error) {
	prompts, err := format.ReadPrompts(dir)
	if err != nil {
		return nil, err
	}
	golds := make(map[string][][]string, len(prompts))
	for _, p := range prompts {
		golds[p.UID] = p.Golds
	}
	return golds, nil
}

func scoreShard(cfg Config, rolls *format.Dataset, w *jobs.Work, golds map[string][][]string) error {
	r, err := format.OpenShard[format.Rollout](rolls, w.Shard)
	if err != nil {
		return err
	}
	rows, err := format.ReadAll(r)
	if err != nil {
		return err
	}
	trajs, err := format.Trajectories(rows)
	if err != nil {
		return fmt.Errorf("%s: %w", rolls.Path(w.Shard), err)
	}
	out := make([]format.Score, 0, len(trajs))
	var tokens int64
	for _, tr := range trajs {
		g, ok := golds[tr[0].UID]
		if !ok {
			return fmt.Errorf("%s: uid %s: not in the prompts dataset: %w", rolls.Path(w.Shard), tr[0].UID, ErrInput)
		}
		res, err := Score(cfg, trajectory(tr), g)
		if err != nil {
			return fmt.Errorf("%s: %w", rolls.Path(w.Shard), err)
		}
		out = append(out, row(res))
		tokens += int64(res.TT)
	}
	slices.SortFunc(out, func(a, b format.Score) int {
		return cmp.Or(cmp.Compare(a.UID, b.UID), cmp.Compare(a.Sample, b.Sample))
	})
	written, err := format.WriteFile(w.Path, out)
	if err != nil {
		return err
	}
	w.Add(written.Rows, tokens)
	return nil
}

func trajectory(rows []format.Rollout) Trajectory {
	tr := Trajectory{UID: rows[0].UID, Sample: int(rows[0].Sample)}
	for _, r := range rows {
		tr.Turns = append(tr.Turns, Turn{Turn: int(r.Turn), PromptTokens: len(r.PromptIDs),
			ResponseTokens: len(r.ResponseIDs), Text: r.Response})
	}
	return tr
}

func row(res Result) format.Score {
	s := format.Score{UID: res.UID, Sample: int32(res.Sample), Answer: res.Answer, FormatOK: res.FormatOK,
		Reward: float32(res.Reward), TT: int64(res.TT), PT: int32(res.PT), Turns: int32(res.Turns),
		EM: make([]float32, len(res.EM)), F1: make([]float32, len(res.F1))}
	for k := range res.EM {
		if res.EM[k] {
			s.EM[k] = 1
		}
		s.F1[k] = float32(res.F1[k])
	}
	return s
}
