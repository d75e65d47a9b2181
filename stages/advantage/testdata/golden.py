#!/usr/bin/env python3
"""Writes grpo.json: MemPO advantages for a random batch, computed independently of the Go code.

Run from this directory with any CPython 3 (no third-party modules):

    python3 golden.py

The outcome advantage follows verl's compute_grpo_outcome_advantage
(verl/trainer/ppo/core_algos.py) line for line, with torch replaced by plain float64:
torch.mean is the mean, torch.std is unbiased (n-1) by default, a group of one gets mean 0
and std 1, epsilon is 1e-6, and norm_adv_by_std_in_grpo=False gives scores - mean. verl runs
this in float32; the Go test allows 1e-6 for that and for summation order. One row per
trajectory is fed to it (MemPO's group is the n trajectories of a question, not their turns),
then each turn of a trajectory carries its trajectory's advantage.

With mem_content_only the memory part goes on the content span (the mem span less its
tags) instead of the whole span. The memory part follows DESIGN.md section 7: R^M = P_mem - b (b = P_full, P_ctx, 0 or a constant); A^M normalised over the
question's memories (or per turn index), unbiased std, epsilon 1e-6, zero for a pool of
fewer than two values or all values equal; per token A^T + coef*A^M on the <mem> span,
A^T elsewhere, rounded to float32.
"""
import json
import math
import random
import struct
from collections import defaultdict

EPSILON = 1e-6


def t_mean(xs):
    return sum(xs) / len(xs)


def t_std(xs):  # torch.std default: unbiased
    m = t_mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def compute_grpo_outcome_advantage(scores, index, epsilon=EPSILON, norm_adv_by_std_in_grpo=True):
    scores = list(scores)
    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}
    bsz = len(scores)
    for i in range(bsz):
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx] = 0.0
            id2std[idx] = 1.0
        elif len(id2score[idx]) > 1:
            id2mean[idx] = t_mean(id2score[idx])
            id2std[idx] = t_std(id2score[idx])
        else:
            raise ValueError(f"no score in prompt index: {idx}")
    for i in range(bsz):
        if norm_adv_by_std_in_grpo:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:
            scores[i] = scores[i] - id2mean[index[i]]
    return scores


def memory_advantage(rewards):
    if len(rewards) < 2 or all(r == rewards[0] for r in rewards):
        return [0.0] * len(rewards)
    m = t_mean(rewards)
    s = t_std(rewards)
    return [(r - m) / (s + EPSILON) for r in rewards]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def make_batch(rng):
    scores, turns = [], []
    sizes = [1, 2, 3, 5, 8, 8]
    for q, n in enumerate(sizes):
        uid = "q%02d" % q
        kind = q % 3
        for s in range(n):
            if q == 5:
                reward = 1.0  # all equal: zero spread
            elif kind == 0:
                reward = float(rng.random() < 0.5)
            elif kind == 1:
                reward = rng.choice([0.0, 0.5, 1.0])
            else:
                reward = rng.random()
            scores.append({"uid": uid, "sample": s, "reward": reward})
            for t in range(rng.randint(1, 4)):
                length = rng.randint(3, 10)
                row = {"uid": uid, "sample": s, "turn": t, "response_len": length}
                if rng.random() < 0.8:
                    start = rng.randint(0, 1)
                    row["mem"] = {"start": start, "end": rng.randint(start + 1, length)}
                    row["p_mem"] = rng.random()
                    row["p_full"] = rng.random()
                turns.append(row)
    rng.shuffle(turns)  # the result must not depend on row order
    return scores, turns


def compute(cfg, scores, turns):
    uids = [s["uid"] for s in scores]
    adv = compute_grpo_outcome_advantage(
        [s["reward"] for s in scores], uids, norm_adv_by_std_in_grpo=not cfg["no_std_norm"])
    outcome = {(s["uid"], s["sample"]): a for s, a in zip(scores, adv)}

    base = cfg["mem_baseline"]
    pools = defaultdict(list)
    mem_reward = {}
    for i, t in enumerate(turns):
        if "mem" not in t:
            continue
        b = {"full": t.get("p_full"), "context": t.get("p_ctx"), "none": 0.0}.get(base)
        if b is None:
            b = float(base.split(":", 1)[1])
        mem_reward[i] = t["p_mem"] - b
        key = (t["uid"], t["turn"] if cfg["mem_pool"] == "turn" else -1)
        pools[key].append(i)
    mem_adv = {}
    for key, rows in pools.items():
        rows.sort(key=lambda i: (turns[i]["sample"], turns[i]["turn"]))
        for i, a in zip(rows, memory_advantage([mem_reward[i] for i in rows])):
            mem_adv[i] = a

    out = []
    for i, t in enumerate(turns):
        a_t = outcome[(t["uid"], t["sample"])]
        a_m = mem_adv.get(i, 0.0)
        toks = [f32(a_t)] * t["response_len"]
        if "mem" in t:
            span = t["content"] if cfg.get("mem_content_only") else t["mem"]
            for j in range(span["start"], span["end"]):
                toks[j] = f32(a_t + cfg["mem_coef"] * a_m)
        out.append({"adv_outcome": a_t, "mem_reward": mem_reward.get(i, 0.0),
                    "adv_memory": a_m, "advantages": toks})
    return out


CONFIGS = [
    {"no_std_norm": False, "mem_baseline": "full", "mem_pool": "question", "mem_coef": 1.0},
    {"no_std_norm": True, "mem_baseline": "const:0.25", "mem_pool": "turn", "mem_coef": 0.5},
    {"no_std_norm": False, "mem_baseline": "none", "mem_pool": "question", "mem_coef": 0.0},
    {"no_std_norm": False, "mem_baseline": "context", "mem_pool": "turn", "mem_coef": 1.0},
    # The memory advantage on the content tokens only: the tags are the span's first and
    # last token (one token each, as the demo's tokenizer has them).
    {"no_std_norm": False, "mem_baseline": "full", "mem_pool": "question", "mem_coef": 1.0,
     "mem_content_only": True},
]


def main():
    rng = random.Random(6)
    scores, turns = make_batch(rng)
    ctx = random.Random(7)  # P_ctx from its own stream, so the other columns stay as they were
    for t in turns:
        if "mem" in t:
            t["p_ctx"] = ctx.random()
            # Content: the span without its first and last token (the tags); empty for a
            # span of one or two tokens. No random draw, so every other column stays.
            start = t["mem"]["start"] + 1
            t["content"] = {"start": start, "end": max(start, t["mem"]["end"] - 1)}
    doc = {
        "scores": scores,
        "turns": turns,
        "cases": [{"config": c, "rows": compute(c, scores, turns)} for c in CONFIGS],
    }
    with open("grpo.json", "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
