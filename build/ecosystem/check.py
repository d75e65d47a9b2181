"""Open a real mempo run with the Python tools the README names.

    python build/ecosystem/check.py RUN_DIR

Datasets: every directory under RUN_DIR with a _manifest.json opens with
pyarrow.dataset.dataset(dir, format="parquet"), pandas.read_parquet(dir) and DuckDB's
read_parquet('dir/*.parquet'); each gives the manifest's row count. The README's own
auditing lines (DuckDB over rollouts, pandas' describe of scores) run as written.

Checkpoints: every directory with checkpoint.json and tokenizer.json loads with
transformers' AutoTokenizer; its eos_token_id and bos_token_id equal config.json's, and
apply_chat_template of a rollout's system and user messages, with the generation prompt,
gives exactly the prompt_ids of that rollout's first turn. Nothing but weights is a
top-level *.safetensors (an inference server such as vLLM loads them all), and
config.json and generation_config.json name the tokenizer's pad_token_id. Where torch
imports too, each loads with AutoModelForCausalLM.from_pretrained and generates 2 tokens
with transformers' log records and Python warnings captured: one about pad_token_id, the
attention mask, or checkpoint files or weights the model did not use or lacked fails
the check. Without torch that step is skipped with a line saying so (check.sh's own
environment has none).

A reader that does not import (duckdb, transformers) is a failed check, not a skip:
build/ecosystem/check.sh runs this with an environment that has them all.

Prints one line per directory, then "N passed, N failed"; exits 1 when any check failed.
"""
import json
import logging
import pathlib
import re
import sys
import warnings

import pandas as pd
import pyarrow.dataset as ds

# Imported here so that a missing one is reported as a failed check (main), not a traceback.
try:
    import duckdb
except ImportError as e:
    duckdb, duckdb_error = None, e

try:
    import transformers
except ImportError as e:
    transformers, transformers_error = None, e

# Optional: only the model load and generate step needs it (see the docstring).
try:
    import torch
except ImportError as e:
    torch, torch_error = None, e

# Rollout rows whose prompts are rendered again with each checkpoint's chat template.
PROMPTS_CHECKED = 4

# What transformers says, while loading a checkpoint and generating, when it does not take
# the directory as it is: a pad id it had to make up (generate's "Setting `pad_token_id`
# to `eos_token_id`"), a missing attention mask, checkpoint weights it did not use or
# model weights the checkpoint lacks.
MODEL_PROBLEMS = re.compile(r"pad_token_id|pad token|attention mask|not used|unused|unexpected|"
                            r"not initialized|newly initialized|missing|unknown", re.IGNORECASE)


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {what}")

    def equal(self, got, want, what):
        self.check(got == want, f"{what}: got {got!r}, want {want!r}")


def manifest_rows(manifest):
    return sum(o["rows"] for o in manifest["outputs"])


def check_dataset(c, path, manifest):
    want = manifest_rows(manifest)
    kind = manifest["kind"]
    # name: (read, the rows it must give)
    readers = {
        "pyarrow": (lambda: ds.dataset(path, format="parquet").to_table().num_rows, want),
        "pandas": (lambda: len(pd.read_parquet(path)), want),
    }
    if duckdb is not None:
        # select * decodes every column, as pandas does; count(*) would read none.
        readers["duckdb"] = (lambda: len(duckdb.sql(f"select * from read_parquet('{path}/*.parquet')").fetchall()), want)
    # The README's auditing lines, as written there.
    if kind == "rollouts" and duckdb is not None:
        readers["README duckdb"] = (lambda: len(duckdb.sql(
            f"select uid, sample, turn, action, query from '{path}/*.parquet' limit 5").fetchall()), min(5, want))
    if kind == "scores":
        readers["README pandas"] = (lambda: pd.read_parquet(path).describe().shape[1] > 0, True)
    for name, (read, expect) in readers.items():
        try:
            got = read()
        except Exception as e:  # the reader's own error names the file and column
            c.check(False, f"{path}: {name}: {type(e).__name__}: {e}")
            continue
        c.equal(got, expect, f"{path}: {name}")
    print(f"dataset {path} ({kind}, {want} rows): {', '.join(readers)}")


def resolve(path, run):
    """A manifest's input path: absolute, relative to the working directory, or to the run."""
    p = pathlib.Path(path)
    for cand in (p, pathlib.Path.cwd() / p, run / p):
        if cand.exists():
            return cand
    return p


def render_user(protocol, question, k):
    # One pass, as the protocol's Go renderer does, so a question holding "{k}" stays as is.
    subs = {"{question}": question, "{k}": str(k)}
    return re.sub(r"\{question\}|\{k\}", lambda m: subs[m.group(0)], protocol["user"])


def shards(path, columns):
    """The columns of a dataset's shards, read without the dataset checks above."""
    files = sorted(str(f) for f in pathlib.Path(path).glob("*.parquet"))
    return ds.dataset(files, format="parquet").to_table(columns=columns).to_pandas()


def first_turn_prompts(run, datasets):
    """(messages, prompt_ids, where) for the first turn of a few trajectories of every rollouts dataset."""
    out = []
    for path, manifest in datasets:
        if manifest["kind"] != "rollouts":
            continue
        protocol = manifest["config"]["protocol"]
        inputs = {i["name"]: i["path"] for i in manifest["inputs"]}
        prompts = shards(resolve(inputs["prompts"], run), ["uid", "question", "golds"])
        by_uid = {r.uid: r for r in prompts.itertuples()}
        rows = shards(path, ["uid", "sample", "turn", "prompt_ids"])
        rows = rows[rows.turn == 0].head(PROMPTS_CHECKED)
        for r in rows.itertuples():
            p = by_uid[r.uid]
            user = render_user(protocol, p.question, max(len(p.golds), 1))
            messages = [{"role": "system", "content": protocol["system"]}, {"role": "user", "content": user}]
            out.append((messages, [int(i) for i in r.prompt_ids], f"{path} uid {r.uid} sample {r.sample}"))
    return out


def check_checkpoint(c, path, prompts):
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    config = json.loads((path / "config.json").read_text())
    c.equal(tok.eos_token_id, config.get("eos_token_id"), f"{path}: tokenizer eos_token_id vs config.json")
    c.equal(tok.bos_token_id, config.get("bos_token_id"), f"{path}: tokenizer bos_token_id vs config.json")
    c.check(tok.pad_token_id is not None, f"{path}: tokenizer has no pad token")
    c.check(tok.model_max_length == config["max_position_embeddings"],
            f"{path}: model_max_length {tok.model_max_length}, want {config['max_position_embeddings']}")
    check_chat_template(c, path, tok, prompts)
    check_layout(c, path, tok)
    if torch is not None:
        check_model(c, path, tok)


def check_chat_template(c, path, tok, prompts):
    for messages, want, where in prompts:
        try:
            got = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        except Exception as e:  # no chat_template, or a template that does not render
            c.check(False, f"{path}: apply_chat_template: {type(e).__name__}: {e}")
            return
        c.check(got == want, f"{path}: apply_chat_template of {where} differs from the rollout's prompt_ids:\n"
                f"  got  {tok.decode(got)!r}\n  want {tok.decode(want)!r}")
    print(f"checkpoint {path}: {type(tok).__name__}, eos {tok.eos_token!r} = {tok.eos_token_id}, "
          f"chat template matches {len(prompts)} rollout prompts")


def check_layout(c, path, tok):
    """Only weights at the top level as *.safetensors; the pad id in both model configs."""
    index = path / "model.safetensors.index.json"
    weights = set(json.loads(index.read_text())["weight_map"].values()) if index.exists() else {"model.safetensors"}
    for f in sorted(path.glob("*.safetensors")):
        c.check(f.name in weights, f"{path}: {f.name} is a top-level .safetensors but no weights file; "
                f"an inference server such as vLLM loads every one as weights")
    for name in ("config.json", "generation_config.json"):
        got = json.loads((path / name).read_text()).get("pad_token_id")
        c.equal(got, tok.pad_token_id, f"{path}: {name} pad_token_id vs the tokenizer's")


class Records(logging.Handler):
    """Collects the messages of the log records of a logger it is added to."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def check_model(c, path, tok):
    """Load path with AutoModelForCausalLM and generate 2 tokens greedily, capturing
    transformers' log records (its library logger, at warning level and above) and
    Python warnings; any matching MODEL_PROBLEMS fails the check."""
    records = Records()
    logger = logging.getLogger("transformers")  # every transformers module logs under it
    logger.addHandler(records)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = transformers.AutoModelForCausalLM.from_pretrained(str(path))
            ids = torch.tensor([tok("who founded acme")["input_ids"]])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=False)
    except Exception as e:  # the loader's own error names the file or key
        c.check(False, f"{path}: AutoModelForCausalLM: {type(e).__name__}: {e}")
        return
    finally:
        logger.removeHandler(records)
        transformers.logging.set_verbosity(verbosity)
    said = records.messages + [f"{w.category.__name__}: {w.message}" for w in caught]
    problems = [m for m in said if MODEL_PROBLEMS.search(m)]
    c.check(not problems, f"{path}: transformers warned loading or generating:\n  " + "\n  ".join(problems))
    c.check(ids.shape[1] < out.shape[1] <= ids.shape[1] + 2,
            f"{path}: generate gave {out.shape[1] - ids.shape[1]} new tokens, want 1 or 2 (2, or eos first)")
    c.equal(model.generation_config.pad_token_id, tok.pad_token_id, f"{path}: loaded generation_config pad_token_id")
    others = [m for m in said if m not in problems]
    print(f"checkpoint {path}: {type(model).__name__} loads and generates, "
          f"{len(problems)} warning(s) about its files or pad id" + (f", other warnings: {others}" if others else ""))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = pathlib.Path(sys.argv[1])
    c = Checks()
    datasets = []
    for m in sorted(run.rglob("_manifest.json")):
        if any(part.startswith(".") for part in m.relative_to(run).parts):
            continue  # a writer's temp dir or snapshot
        manifest = json.loads(m.read_text())
        datasets.append((m.parent, manifest))
        check_dataset(c, m.parent, manifest)
    c.check(datasets, f"{run}: no dataset (no _manifest.json)")
    if duckdb is None:
        c.check(False, f"duckdb: does not import ({duckdb_error}); its readers did not run")

    checkpoints = sorted(p.parent for p in run.rglob("checkpoint.json")
                         if (p.parent / "tokenizer.json").exists() and not any(
                             part.startswith(".") for part in p.relative_to(run).parts))
    if transformers is None:
        c.check(False, f"transformers: does not import ({transformers_error}); "
                f"{len(checkpoints)} checkpoints not opened with AutoTokenizer")
    else:
        prompts = first_turn_prompts(run, datasets)
        c.check(prompts, f"{run}: no rollouts to render prompts of")
        c.check(checkpoints, f"{run}: no checkpoint with tokenizer.json")
        for path in checkpoints:
            check_checkpoint(c, path, prompts)
        if torch is None:
            print(f"model: skipped loading {len(checkpoints)} checkpoints with AutoModelForCausalLM "
                  f"(torch does not import: {torch_error})")
    print(f"ecosystem: {c.passed} passed, {c.failed} failed")
    sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()
