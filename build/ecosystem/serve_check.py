"""Drives `mempo serve-policy` on a run's policy checkpoint with OpenAI's Python client.

    python serve_check.py RUN_DIR MEMPO_BINARY

Starts the server on a free loopback port and checks, through the client's own types,
every endpoint and option the server implements: models, completions (string and
list prompts, n, seed, logprobs with alternatives, echo, stop strings,
stop_token_ids), chat (logprobs with top_logprobs, n), streamed completions (echo
too) and chats of several choices with log-probs (equal to the unstreamed answers),
/tokenize and /detokenize, and refusals of an unknown and of an unimplemented parameter. Exits 1
naming every check that failed.
"""
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import openai

failures = []


def check(ok, what):
    print(f"serve: {'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        failures.append(what)


def policy_checkpoint(run):
    """The run's last policy checkpoint (an update's), else its SFT checkpoint."""
    found = sorted(p.parent for p in run.rglob("checkpoint.json") if (p.parent / "tokenizer.json").exists())
    if not found:
        sys.exit(f"serve: no checkpoint with tokenizer.json under {run}")
    policies = [p for p in found if p.name == "policy"]
    return (policies or found)[-1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def start(mempo, ckpt, port, log):
    # One row at a time: log-probs may differ in the last bits with the batch's shape,
    # so only then do a request's choices, streamed or not, agree to the bit.
    proc = subprocess.Popen([mempo, "serve-policy", "--policy", str(ckpt), "--served-model-name", "policy",
                             "--addr", f"127.0.0.1:{port}", "--max-batch", "1"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"serve: serve-policy exited with {proc.returncode}; log in {log.name}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit(f"serve: serve-policy did not answer /health within 120 s; log in {log.name}")


def completions(c):
    models = c.models.list()
    check([m.id for m in models.data] == ["policy"], "models.list names the served model")
    ids_as_text = {"return_tokens_as_token_ids": True}  # one key per token in top_logprobs
    r = c.completions.create(model="policy", prompt="Who was born in", max_tokens=8, seed=1, n=2, logprobs=3,
                             extra_body=ids_as_text)
    check(len(r.choices) == 2 and [ch.index for ch in r.choices] == [0, 1], "n 2 gives choices 0 and 1")
    lp = r.choices[0].logprobs
    check(all(len(m) in (3, 4) and m[t] == v for t, v, m in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)),
          "logprobs 3: the 3 likeliest tokens per position, the sampled one at its token_logprobs value")
    again = c.completions.create(model="policy", prompt="Who was born in", max_tokens=8, seed=1, n=2, logprobs=3,
                                 extra_body=ids_as_text)
    check(again.choices[1].logprobs == r.choices[1].logprobs, "the same seed gives the same tokens and log-probs")
    lists = c.completions.create(model="policy", prompt=["a", "b c"], max_tokens=3, seed=2)
    check(len(lists.choices) == 2, "a list of prompts gives a choice each")
    one = c.completions.create(model="policy", prompt="Who was born in", max_tokens=8, seed=1, logprobs=1,
                               extra_body=ids_as_text).choices[0]
    e = c.completions.create(model="policy", prompt="Who was born in", max_tokens=8, seed=1, logprobs=1, echo=True,
                             extra_body=ids_as_text)
    elp = e.choices[0].logprobs
    check(e.choices[0].text == "Who was born in" + one.text and elp.token_logprobs[0] is None
          and elp.token_logprobs[len(elp.tokens) - len(one.logprobs.tokens):] == one.logprobs.token_logprobs,
          "echo: the prompt's text first, its first token's log-prob null, the completion's unchanged")
    greedy = c.completions.create(model="policy", prompt="Who was born in", max_tokens=12, temperature=0)
    ids = greedy.choices[0].model_extra["token_ids"]
    s = c.completions.create(model="policy", prompt="Who was born in", max_tokens=12, temperature=0,
                             extra_body={"stop_token_ids": [ids[2]]})
    ch = s.choices[0]
    check(ch.finish_reason == "stop" and ch.model_extra["stop_reason"] == ids[2]
          and ch.model_extra["token_ids"] == ids[:ids.index(ids[2]) + 1],
          "stop_token_ids: stops at the id, stop_reason the id")
    text = greedy.choices[0].text
    stop = text[1:4]
    if stop.strip():
        t = c.completions.create(model="policy", prompt="Who was born in", max_tokens=12, temperature=0, stop=[stop]).choices[0]
        check(t.finish_reason == "stop" and t.text.endswith(stop) and text.startswith(t.text),
              f"stop string {stop!r} ends the text with it")
    stream = c.completions.create(model="policy", prompt="Who was born in", max_tokens=8, seed=1, n=2, logprobs=3,
                                  stream=True, extra_body=ids_as_text)
    texts, tokens = ["", ""], [[], []]
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] += ch.text
            tokens[ch.index] += ch.logprobs.tokens if ch.logprobs else []
    check(texts == [ch.text for ch in r.choices] and tokens == [ch.logprobs.tokens for ch in r.choices],
          "a streamed completion of n 2 with logprobs is the unstreamed one")
    echoed = c.completions.create(model="policy", prompt="Who was born in", max_tokens=8, seed=1, n=2, logprobs=3,
                                  echo=True, extra_body=ids_as_text)
    stream = c.completions.create(model="policy", prompt="Who was born in", max_tokens=8, seed=1, n=2, logprobs=3,
                                  echo=True, stream=True, extra_body=ids_as_text)
    texts, lps, firsts = ["", ""], [[], []], [None, None]
    for chunk in stream:
        for ch in chunk.choices:
            if firsts[ch.index] is None:
                firsts[ch.index] = ch
            texts[ch.index] += ch.text
            if ch.logprobs:
                lps[ch.index] += list(zip(ch.logprobs.tokens, ch.logprobs.token_logprobs, ch.logprobs.top_logprobs))
    check(all(f is not None and f.text.startswith("Who was born in") and f.logprobs.token_logprobs[0] is None
              for f in firsts),
          "echo streamed: each choice's first chunk starts with the prompt, its first token's log-prob null")
    check(texts == [ch.text for ch in echoed.choices]
          and lps == [list(zip(ch.logprobs.tokens, ch.logprobs.token_logprobs, ch.logprobs.top_logprobs))
                      for ch in echoed.choices],
          "an echoed streamed completion of n 2 with logprobs is the unstreamed one")


def chats(c):
    msgs = [{"role": "user", "content": "Who was born in Paris?"}]
    r = c.chat.completions.create(model="policy", messages=msgs, max_tokens=6, seed=3, n=2, logprobs=True, top_logprobs=2)
    content = r.choices[1].logprobs.content
    check(r.choices[0].message.role == "assistant" and all(len(t.top_logprobs) == 2 for t in content),
          "chat: logprobs with top_logprobs 2 per token")
    stream = c.chat.completions.create(model="policy", messages=msgs, max_tokens=6, seed=3, n=2, logprobs=True,
                                       top_logprobs=2, stream=True)
    texts, lps = ["", ""], [[], []]
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            lps[ch.index] += ch.logprobs.content if ch.logprobs else []
    check(texts == [ch.message.content for ch in r.choices] and lps == [ch.logprobs.content for ch in r.choices],
          "a streamed chat of n 2 with log-probs is the unstreamed one")


def refusals(c):
    for what, kw in [("an unknown parameter", {"extra_body": {"frobnicate": 1}}),
                     ("frequency_penalty 0.5", {"frequency_penalty": 0.5})]:
        name = "frobnicate" if "extra_body" in kw else "frequency_penalty"
        try:
            c.completions.create(model="policy", prompt="a", max_tokens=2, **kw)
            check(False, f"{what} is refused")
        except openai.BadRequestError as e:
            check(name in str(e), f"{what} is refused with a 400 naming it")


def main():
    run, mempo = Path(sys.argv[1]), sys.argv[2]
    ckpt = policy_checkpoint(run)
    port = free_port()
    with tempfile.NamedTemporaryFile("w", prefix="serve-check-", suffix=".log", delete=False) as log:
        log_path = log.name
        proc = start(mempo, ckpt, port, log)
        try:
            print(f"serve: {mempo} serve-policy --policy {ckpt} on port {port}, openai {openai.__version__}")
            c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=120)
            completions(c)
            chats(c)
            refusals(c)
            base = f"http://127.0.0.1:{port}"
            tok = post(base, "/tokenize", {"prompt": "Who was born in"})
            back = post(base, "/detokenize", {"tokens": tok["tokens"]})
            check(tok["count"] == len(tok["tokens"]) and back["prompt"] == "Who was born in", "tokenize and detokenize round-trip")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if failures:
        sys.exit(f"serve: {len(failures)} checks failed: {'; '.join(failures)} (server log {log_path})")


if __name__ == "__main__":
    main()
