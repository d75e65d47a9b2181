#!/usr/bin/env python3
"""The PyTorch / transformers side of mempo's benchmarks, and the ratio table (README, "Speed against PyTorch").

    compare.py torch --iters 3 --out torch.json   # time the PyTorch workloads
    compare.py table --go go.txt --torch torch.json [--torch more.json]   # markdown table
    compare.py torch --device cuda --dtype bfloat16 --bench 'Decode05B' --out gpu.json   # on a GPU

`torch` builds Qwen2ForCausalLM (transformers 4.44.2, PyTorch 2.1.2, float32, CPU) from
configs equal to mempo's presets (model/qwen2/config.go), randomly initialised with a
fixed seed, and times the workloads of the Go benchmarks named in WORKLOADS with the
same shapes, the same thread counts (torch.set_num_threads) and the same iteration
count, after one untimed warm-up call. Each rate comes twice, as the Go benchmarks
report them: over all iterations (tokens/s, steps/s) and of the fastest iteration
(best-tokens/s, best-steps/s), which the table compares because the machines these
run on are shared and the minimum drops the time other processes took. Where mempo's
benchmark scores only the response positions through the head (log-probs, the
update), this side does the same
(the decoder via `model.model`, then `lm_head`, log-softmax, gather and entropy in
chunks of 256 positions), so a ratio compares implementations of the same algorithm,
not the algorithms. Attention is transformers' default for Qwen2 under PyTorch 2.1
("sdpa"; --attn eager for the explicit matmul-softmax that mempo runs).

The roofline figures follow the Go side (model/qwen2/roofline_bench_test.go):
gemm-fraction is the matmul work of the fastest iteration (2 FLOPs per decoder weight
per position plus 2·vocab·hidden per position through the head; attention scores
left out) over the peak fp32 GEMM rate (fastest 1024³ product of zeros in 300 ms)
measured here at the same thread count; the optimizer's bw-fraction is 40 bytes per
parameter per step over the peak copy bandwidth (two 256 MiB float32 tensors).

On an accelerator (--device cuda, with --dtype float32, bfloat16 or float16, the
Go side run with MEMPO_TEST_DEVICE and MEMPO_TEST_DTYPE as build/gpu_check does) the
models and inputs live on the device, every timed call ends with
torch.cuda.synchronize(), log-softmax and entropy run in float32 as mempo's do, the
peak GEMM is the fastest 4096³ product in that dtype and the copy bandwidth is the
device's; the optimizer is torch.optim.AdamW over the parameters in that dtype (mempo
keeps float32 master weights for a half-precision parameter, so it does more work).
The defaults, CPU and float32, are the table the README shows.

`table` needs neither torch nor transformers.
"""

import argparse
import json
import math
import platform
import re
import sys
import time

# mempo's presets, field for field (model/qwen2/config.go presets and Preset).
PRESETS = {
    "tiny": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                 max_position_embeddings=4096, rms_norm_eps=1e-6, vocab_size=4096),
    "qwen2.5-0.5b-shape": dict(hidden_size=896, intermediate_size=4864,
                               num_hidden_layers=24, num_attention_heads=14,
                               num_key_value_heads=2, rope_theta=1000000.0,
                               max_position_embeddings=32768, rms_norm_eps=1e-6,
                               vocab_size=151936),
    "qwen2.5-1.5b-shape": dict(hidden_size=1536, intermediate_size=8960,
                               num_hidden_layers=28, num_attention_heads=12,
                               num_key_value_heads=2, rope_theta=1000000.0,
                               max_position_embeddings=32768, rms_norm_eps=1e-6,
                               vocab_size=151936),
}

# train.DefaultObjective and train.DefaultAdamW.
CLIP_LOW, CLIP_HIGH, DUAL_C, RATIO_CLAMP = 0.2, 0.2, 3.0, 20.0
KL_COEF = 0.001
ADAMW = dict(lr=1e-6, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
MAX_GRAD_NORM = 1.0
ADAMW_BYTES = 40  # stages/update adamWBytes

CHUNK = 256  # qwen2.ScoreConfig default chunk
OLD_PASS_BUDGET = 8192  # logprob.DefaultConfig token budget


def num_params(c):
    """qwen2.Config.NumParams for a tied preset."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * (h // c["num_attention_heads"])
    attn = h * h + h + 2 * (h * kv + kv) + h * h
    layer = attn + 3 * h * i + 2 * h
    return v * h + c["num_hidden_layers"] * layer + h


def forward_flops(c, tokens, scored):
    """forwardFLOPs of the Go benchmarks."""
    head = c["vocab_size"] * c["hidden_size"]
    body = num_params(c) - head
    return 2 * body * tokens + 2 * head * scored


def budget_batches(lengths, budget):
    """qwen2.BudgetBatches: longest first (stable), rows × longest length ≤ budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out, cur, width = [], [], 0
    for i in order:
        w = max(width, lengths[i])
        if cur and (len(cur) + 1) * w > budget:
            out.append(cur)
            cur, w = [], lengths[i]
        cur.append(i)
        width = w
    if cur:
        out.append(cur)
    return out


def old_pass_rows():
    """(context, response) lengths of stages/logprob benchRollouts(2, 8, 5): a 150-token
    prompt, 60-token responses, and from the second turn on a context of the prompt, 40
    tokens of the previous response and a 120-token observation."""
    rows = []
    for _q in range(2):
        for _s in range(8):
            for t in range(5):
                rows.append((150 if t == 0 else 150 + 30 + 10 + 120, 60))
    return rows


# Each workload: the Go benchmark it matches (without the threads=N level), its thread
# counts, and the function that times it.
WORKLOADS = []


def workload(name, threads):
    def reg(f):
        WORKLOADS.append((name, threads, f))
        return f
    return reg


class Bench:
    """Holds torch, the seeds and the per-thread-count rooflines."""

    def __init__(self, iters, attn, device="cpu", dtype="float32"):
        import torch
        import transformers
        self.torch, self.tf = torch, transformers
        self.iters, self.attn = iters, attn
        self.device, self.dtype = torch.device(device), getattr(torch, dtype)
        self.cuda = self.device.type == "cuda"
        self.gemm, self.copy = {}, {}

    def sync(self):
        """Waits for the device's queued kernels (CUDA runs them asynchronously)."""
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def on_device(self, x):
        """x on the benchmark device (it is made on the CPU, from CPU generators)."""
        return x.to(self.device) if self.cuda else x

    def model(self, preset, layers=None, train=False):
        torch, tf = self.torch, self.tf
        c = dict(PRESETS[preset])
        if layers:
            c["num_hidden_layers"] = layers
        cfg = tf.Qwen2Config(**c, max_window_layers=c["num_hidden_layers"],
                             tie_word_embeddings=True, hidden_act="silu",
                             initializer_range=0.02, use_sliding_window=False,
                             attention_dropout=0.0, use_cache=True, torch_dtype="float32",
                             bos_token_id=None, eos_token_id=None,
                             attn_implementation=self.attn)
        torch.manual_seed(1)
        m = tf.Qwen2ForCausalLM(cfg).float()
        if self.cuda or self.dtype != torch.float32:
            m = m.to(device=self.device, dtype=self.dtype)
        m.train(train)
        m.requires_grad_(train)
        return m, c

    def ids(self, seed, shape, vocab):
        g = self.torch.Generator().manual_seed(seed)
        return self.on_device(self.torch.randint(0, vocab, shape, generator=g))

    def measure(self, op):
        """Calls per second of the fastest call of op in 300 ms, after a warm-up."""
        op()
        self.sync()
        best, start = math.inf, time.perf_counter()
        while time.perf_counter() - start < 0.3:
            t = time.perf_counter()
            op()
            self.sync()
            best = min(best, time.perf_counter() - t)
        return 1 / best

    def gemm_flops(self):
        n = self.torch.get_num_threads()
        if n not in self.gemm:
            k = 4096 if self.cuda else 1024
            a = self.torch.zeros(k, k, device=self.device, dtype=self.dtype)
            self.gemm[n] = 2 * k**3 * self.measure(lambda: a @ a)
        return self.gemm[n]

    def copy_bandwidth(self):
        n = self.torch.get_num_threads()
        if n not in self.copy:
            src = self.torch.zeros(64 << 20, device=self.device)
            dst = self.torch.zeros(64 << 20, device=self.device)
            self.copy[n] = 2 * 4 * (64 << 20) * self.measure(lambda: dst.copy_(src))
        return self.copy[n]

    def time(self, op):
        """Warm-up call, then iters calls: total and fastest seconds, iterations."""
        op()
        self.sync()
        total, best = 0.0, math.inf
        for _ in range(self.iters):
            t = time.perf_counter()
            op()
            self.sync()
            d = time.perf_counter() - t
            total, best = total + d, min(best, d)
        return total, best, self.iters

    def rate(self, op, tokens, flops):
        self.gemm_flops()
        el, best, n = self.time(op)
        g = self.gemm_flops()
        return {"tokens/s": tokens * n / el, "best-tokens/s": tokens / best,
                "gemm-fraction": flops / best / g, "gemm-GFLOP/s": g / 1e9}

    def score(self, m, ids, mask, spans, entropy, temperature=1.0):
        """Log-probs (and entropies) of the response spans (row, start, length) as
        qwen2.LogProbTensor: hidden states, the scored positions, then the head, a
        log-softmax and a gather chunk by chunk."""
        torch = self.torch
        rows, width = ids.shape
        h = m.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        at = self.on_device(torch.cat([torch.arange(r * width + s - 1, r * width + s - 1 + n) for r, s, n in spans]))
        tgt = ids.reshape(-1).index_select(0, at + 1)
        sel = h.reshape(rows * width, -1).index_select(0, at)
        lps, ents = [], []
        for s in range(0, at.numel(), CHUNK):
            logits = m.lm_head(sel[s:s + CHUNK])
            if logits.dtype != torch.float32:
                logits = logits.float()  # mempo's log-softmax runs in float32
            if temperature != 1:
                logits = logits / temperature
            lse = logits.logsumexp(-1)
            lps.append(logits.gather(1, tgt[s:s + CHUNK, None]).squeeze(1) - lse)
            if entropy:
                ents.append(lse - (logits.softmax(-1) * logits).sum(-1))
        return torch.cat(lps), (torch.cat(ents) if entropy else None)


def forward(b, preset, layers, batch, seq):
    m, c = b.model(preset, layers)
    ids = b.ids(1, (batch, seq), c["vocab_size"])
    mask = b.torch.ones_like(ids)

    def op():
        with b.torch.inference_mode():
            m(input_ids=ids, attention_mask=mask, use_cache=False).logits
    return b.rate(op, batch * seq, forward_flops(c, batch * seq, batch * seq))


@workload("ForwardTiny", [1, 2])
def forward_tiny(b):
    return forward(b, "tiny", None, 8, 128)


@workload("Forward05BShape2L", [1, 2])
def forward_05b(b):
    return forward(b, "qwen2.5-0.5b-shape", 2, 1, 128)


def logprobs(b, preset, layers, n, ctx, resp):
    """n rows of ctx context and resp response tokens, scored with entropy in one batch."""
    m, c = b.model(preset, layers)
    ids = b.ids(3, (n, ctx + resp), c["vocab_size"])
    mask = b.torch.ones_like(ids)
    spans = [(r, ctx, resp) for r in range(n)]

    def op():
        with b.torch.inference_mode():
            b.score(m, ids, mask, spans, entropy=True)
    return b.rate(op, n * (ctx + resp), forward_flops(c, n * (ctx + resp), n * resp))


@workload("LogProbsTiny", [1, 2])
def logprobs_tiny(b):
    return logprobs(b, "tiny", None, 16, 64, 64)


@workload("LogProbs05BShape2L", [1, 2])
def logprobs_05b(b):
    return logprobs(b, "qwen2.5-0.5b-shape", 2, 16, 192, 64)


@workload("LogProbs15BShape2L", [1, 2])
def logprobs_15b(b):
    return logprobs(b, "qwen2.5-1.5b-shape", 2, 16, 192, 64)


@workload("OldPass", [2])
def old_pass(b):
    return old_pass_on(b, "tiny", None)


@workload("OldPass05BShape2L", [2])
def old_pass_05b(b):
    return old_pass_on(b, "qwen2.5-0.5b-shape", 2)


def old_pass_on(b, preset, layers):
    """The old pass's rows in right-padded budget batches, as PyTorch eager (and verl's
    actor) scores them: every row's whole context is computed."""
    m, c = b.model(preset, layers)
    rows = old_pass_rows()
    lengths = [x + y for x, y in rows]
    batches = []
    for k, idx in enumerate(budget_batches(lengths, OLD_PASS_BUDGET)):
        width = max(lengths[i] for i in idx)
        ids = b.ids(10 + k, (len(idx), width), c["vocab_size"])
        mask = b.torch.zeros_like(ids)
        for r, i in enumerate(idx):
            mask[r, :lengths[i]] = 1
        ids = ids * mask  # right padding with id 0
        batches.append((ids, mask, [(r, rows[i][0], rows[i][1]) for r, i in enumerate(idx)]))

    def op():
        with b.torch.inference_mode():
            for ids, mask, spans in batches:
                b.score(m, ids, mask, spans, entropy=False)
    tokens = sum(lengths)
    scored = sum(y for _, y in rows)
    return b.rate(op, tokens, forward_flops(c, tokens, scored))


def decode(b, batch, preset="tiny", layers=None):
    m, c = b.model(preset, layers)
    ids = b.ids(2, (batch, 64), c["vocab_size"])
    mask = b.torch.ones_like(ids)
    new = 32

    def op():
        with b.torch.inference_mode():
            out = m.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                             temperature=1.0, top_p=0.9, top_k=0, max_new_tokens=new,
                             min_new_tokens=new, pad_token_id=0)
        if out.shape != (batch, 64 + new):
            raise SystemExit(f"generate returned {tuple(out.shape)}, want {(batch, 64 + new)}")
    b.torch.manual_seed(2)
    return b.rate(op, batch * new, forward_flops(c, batch * (64 + new - 1), batch * new))


@workload("DecodeTiny", [1, 2])
def decode_tiny(b):
    return decode(b, 8)


@workload("DecodeTiny16", [1, 2])
def decode_tiny16(b):
    return decode(b, 16)


@workload("Decode05BShape2L16", [1, 2])
def decode_05b16(b):
    return decode(b, 16, "qwen2.5-0.5b-shape", 2)


@workload("Decode05BShape2L64", [1, 2])
def decode_05b64(b):
    return decode(b, 64, "qwen2.5-0.5b-shape", 2)


@workload("Decode15BShape2L16", [1, 2])
def decode_15b16(b):
    return decode(b, 16, "qwen2.5-1.5b-shape", 2)


@workload("Decode15BShape2L64", [1, 2])
def decode_15b64(b):
    return decode(b, 64, "qwen2.5-1.5b-shape", 2)


class Update:
    """The update on 2 turns of 192 context and 64 response tokens: the policy's
    log-probs and entropies with gradients, the PPO objective (dual-clip, k3 KL at
    0.001, token-mean) and its backward pass; optionally AdamW with clipping."""

    turns, ctx, resp = 2, 192, 64

    def __init__(self, b, preset="qwen2.5-0.5b-shape"):
        torch = b.torch
        self.b = b
        self.m, self.c = b.model(preset, 2, train=True)
        n, w = self.turns, self.ctx + self.resp
        self.ids = b.ids(1, (n, w), self.c["vocab_size"])
        self.mask = torch.ones_like(self.ids)
        self.spans = [(r, self.ctx, self.resp) for r in range(n)]
        g = torch.Generator().manual_seed(1)
        self.old = b.on_device(-8 + 0.1 * torch.randn(n, self.resp, generator=g))
        self.ref = b.on_device(-8 + 0.1 * torch.randn(n, self.resp, generator=g))
        self.adv = b.on_device(torch.randn(n, self.resp, generator=g))
        self.params = [p for p in self.m.parameters()]
        # On the CPU the per-tensor loop mempo's AdamW matches bit for bit; on a GPU
        # PyTorch's default there, the multi-tensor (foreach) kernels.
        self.opt = torch.optim.AdamW(self.params, foreach=None if b.cuda else False, **ADAMW)

    def backward(self):
        torch = self.b.torch
        lp, ent = self.b.score(self.m, self.ids, self.mask, self.spans, entropy=True)
        logp = lp.view(self.turns, self.resp)
        div = float(logp.numel())
        neg_kl = (logp - self.old).clamp(-RATIO_CLAMP, RATIO_CLAMP)
        ratio = neg_kl.exp()
        pg1 = -self.adv * ratio
        pg2 = -self.adv * ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH)
        clip1 = torch.maximum(pg1, pg2)
        clip2 = torch.minimum(-self.adv * DUAL_C, clip1)
        pg = torch.where(self.adv < 0, clip2, clip1).sum() / div
        kl = self.ref - logp
        k3 = (kl.exp() - kl - 1).clamp(-10, 10).sum() / div
        loss = pg + KL_COEF * k3
        (ent.detach().sum() / div).item()  # the entropy metric, as PPOStep.Micro reports it
        if not math.isfinite(loss.item()):
            raise SystemExit(f"loss {loss.item()}")
        loss.backward()

    def step(self):
        norm = self.b.torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM)
        if not math.isfinite(norm.item()):
            raise SystemExit(f"gradient norm {norm.item()}")
        self.opt.step()

    def flops(self):
        n = self.turns
        return 3 * forward_flops(self.c, n * (self.ctx + self.resp), n * self.resp)


@workload("Update05BShape2L", [1, 2])
def update_fwd_bwd(b):
    u = Update(b)

    def op():
        u.backward()
        u.m.zero_grad()
    return b.rate(op, u.turns * (u.ctx + u.resp), u.flops())


@workload("UpdateAdamW05BShape2L", [1, 2])
def update_adamw(b):
    return update_adamw_preset(b, "qwen2.5-0.5b-shape")


@workload("UpdateAdamW15BShape2L", [1, 2])
def update_adamw_15b(b):
    return update_adamw_preset(b, "qwen2.5-1.5b-shape")


def update_adamw_preset(b, preset):
    u = Update(b, preset)

    def op():
        u.backward()
        u.step()
        u.opt.zero_grad()
    r = b.rate(op, u.turns * (u.ctx + u.resp), u.flops())
    r["steps/s"] = r["tokens/s"] / (u.turns * (u.ctx + u.resp))
    return r


@workload("AdamWStep05BShape2L", [1, 2])
def adamw_step(b):
    u = Update(b)
    u.backward()
    bw = b.copy_bandwidth()
    el, best, n = b.time(u.step)
    params = num_params(u.c)
    return {"steps/s": n / el, "best-steps/s": 1 / best, "params/s": params / best,
            "bw-fraction": params / best * ADAMW_BYTES / bw, "copy-GB/s": bw / 1e9}


def run_torch(args):
    b = Bench(args.iters, args.attn, args.device, args.dtype)
    torch = b.torch
    if b.cuda and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: torch {torch.__version__} sees no CUDA device")
    pattern = re.compile(args.bench)
    out = {"torch": torch.__version__, "transformers": b.tf.__version__,
           "python": platform.python_version(), "attn": args.attn, "iters": args.iters,
           "results": {}}
    if b.cuda or args.dtype != "float32":
        out["device"], out["dtype"] = args.device, args.dtype
        if b.cuda:
            out["gpu"] = torch.cuda.get_device_name(b.device)
    for name, threads, f in WORKLOADS:
        for n in threads:
            key = f"{name}/threads={n}"
            if not pattern.search(key):
                continue
            torch.set_num_threads(n)
            r = f(b)
            r["threads"] = torch.get_num_threads()
            out["results"][key] = r
            print(f"{key:36s} " + "  ".join(f"{v:.4g} {k}" for k, v in r.items()), flush=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


# The table: workload, shape, the Go benchmark (without threads=N) and the rate that
# the ratio compares; the roofline column is gemm-fraction, or bw-fraction for the
# optimizer alone. OldPass/heap=bounded is the stage (torch.BoundHeap); heap=default
# is the same pass under glibc's defaults, as PyTorch runs.
ROWS = [
    ("forward", "tiny 8×128", "ForwardTiny", "best-tokens/s"),
    ("forward", "0.5B-shaped 2 layers, 1×128", "Forward05BShape2L", "best-tokens/s"),
    ("log-probs + entropy", "tiny 16×(64+64)", "LogProbsTiny", "best-tokens/s"),
    ("old log-prob pass (stage, bounded heap)", "tiny, 80 rows, 27040 tokens", "OldPass/heap=bounded", "best-tokens/s"),
    ("old log-prob pass (glibc heap)", "tiny, 80 rows, 27040 tokens", "OldPass/heap=default", "best-tokens/s"),
    ("old log-prob pass (stage, bounded heap)", "0.5B-shaped 2 layers, 80 rows, 27040 tokens",
     "OldPass05BShape2L/heap=bounded", "best-tokens/s"),
    ("decode vs `generate` (top-p 0.9)", "tiny, batch 8, 64+32", "DecodeTiny", "best-tokens/s"),
    ("decode vs `generate` (top-p 0.9)", "tiny, batch 16, 64+32", "DecodeTiny16", "best-tokens/s"),
    ("update fwd+bwd", "0.5B-shaped 2 layers, 2×256", "Update05BShape2L", "best-tokens/s"),
    ("update incl. AdamW", "0.5B-shaped 2 layers, 2×256", "UpdateAdamW05BShape2L", "best-tokens/s"),
    ("AdamW step alone", "0.5B-shaped 2 layers, 166M params", "AdamWStep05BShape2L", "best-steps/s"),
    # Sized for an accelerator (build/gpu_check; the Go side skips without MEMPO_TEST_DEVICE).
    ("log-probs + entropy", "0.5B-shaped 2 layers, 16×(192+64)", "LogProbs05BShape2L", "best-tokens/s"),
    ("log-probs + entropy", "1.5B-shaped 2 layers, 16×(192+64)", "LogProbs15BShape2L", "best-tokens/s"),
    ("decode vs `generate` (top-p 0.9)", "0.5B-shaped 2 layers, batch 16, 64+32", "Decode05BShape2L16", "best-tokens/s"),
    ("decode vs `generate` (top-p 0.9)", "0.5B-shaped 2 layers, batch 64, 64+32", "Decode05BShape2L64", "best-tokens/s"),
    ("decode vs `generate` (top-p 0.9)", "1.5B-shaped 2 layers, batch 16, 64+32", "Decode15BShape2L16", "best-tokens/s"),
    ("decode vs `generate` (top-p 0.9)", "1.5B-shaped 2 layers, batch 64, 64+32", "Decode15BShape2L64", "best-tokens/s"),
    ("update incl. AdamW", "1.5B-shaped 2 layers, 2×256", "UpdateAdamW15BShape2L", "best-tokens/s"),
]

BENCH_LINE = re.compile(r"^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$")


def parse_go(path):
    """Benchmark name (no GOMAXPROCS suffix) → {unit: value} from go test -bench output."""
    out = {}
    with open(path) as fh:
        for line in fh:
            m = BENCH_LINE.match(line.strip())
            if not m:
                continue
            f = m.group(2).split()
            out[m.group(1)] = {f[i + 1]: float(f[i]) for i in range(0, len(f) - 1, 2)}
    return out


def num(x):
    """A rate as the table prints it: whole numbers from 100 up, else 3 digits."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def table(args):
    go = parse_go(args.go)
    res = {}
    for path in args.torch:
        with open(path) as fh:
            pt = json.load(fh)
        res.update(pt["results"])
    device, dtype = pt.get("device", "cpu"), pt.get("dtype", "float32")
    where = "float32 on CPU" if (device, dtype) == ("cpu", "float32") else f"{dtype} on {pt.get('gpu', device)}"
    peak = "fp32" if dtype == "float32" else dtype
    lines = [
        f"mempo vs PyTorch {pt['torch']} / transformers {pt['transformers']} eager "
        f"(attention: {pt['attn']}), {where}; the fastest of {pt['iters']} timed "
        "iterations a side after one warm-up.",
        f"Roofline: the fraction of the peak {peak} GEMM rate each side measured at that thread "
        "count (AdamW alone: of the copy bandwidth, at 40 B/parameter).",
        "",
        "| workload | shape | threads | rate | mempo | PyTorch | mempo ÷ PyTorch | roofline mempo / PyTorch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for label, shape, bench, unit in ROWS:
        names = sorted(k for k in go if k.startswith(bench + "/threads="))
        for name in names:
            seen.add(name)
            threads = name.rsplit("threads=", 1)[1]
            tkey = re.sub(r"/heap=\w+", "", name)
            g, t = go[name], res.get(tkey)
            roof = "bw-fraction" if unit.endswith("steps/s") else "gemm-fraction"
            if t is None:
                lines.append(f"| {label} | {shape} | {threads} | {unit} | {num(g.get(unit, math.nan))} | not run | | |")
                continue
            ratio = g[unit] / t[unit]
            lines.append(
                f"| {label} | {shape} | {threads} | {unit} | {num(g[unit])} | {num(t[unit])} | "
                f"**{ratio:.2f}×** | {g.get(roof, math.nan):.2f} / {t.get(roof, math.nan):.2f} |")
    lines.append("")
    for metric, what in [("gemm-GFLOP/s", f"peak {peak} GEMM, GFLOP/s"), ("copy-GB/s", "peak copy, GB/s")]:
        for n in ("1", "2"):
            spread = []
            for side in (go, res):
                xs = [v[metric] for k, v in side.items() if metric in v and k.endswith("threads=" + n)]
                spread.append(f"{min(xs):.0f}–{max(xs):.0f}" if xs else "n/a")
            lines.append(f"{what} at {n} thread(s), as each benchmark measured it: "
                         f"mempo {spread[0]}, PyTorch {spread[1]}.")
    missing = sorted(set(go) - seen)
    if missing:
        lines.append("")
        lines.append("Go benchmarks without a PyTorch row: " + ", ".join(missing) + ".")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch", help="time the PyTorch workloads")
    t.add_argument("--iters", type=int, default=3, help="timed iterations per workload")
    t.add_argument("--bench", default=".", help="regexp over workload/threads=N names")
    t.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    t.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (the Go side: MEMPO_TEST_DEVICE)")
    t.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="weights and activations (the Go side: MEMPO_TEST_DTYPE)")
    t.add_argument("--out", required=True, help="JSON results")
    r = sub.add_parser("table", help="print the markdown ratio table")
    r.add_argument("--go", required=True, help="go test -bench output")
    r.add_argument("--torch", required=True, action="append",
                   help="compare.py torch output (repeatable; later files win)")
    args = p.parse_args()
    if args.cmd == "torch":
        run_torch(args)
    else:
        table(args)


if __name__ == "__main__":
    sys.exit(main())
