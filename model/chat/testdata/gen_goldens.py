"""Render testdata/cases.json with transformers' apply_chat_template, for model/chat's goldens.

    PYTHON gen_goldens.py TOKENIZER_JSON QWEN3_TOKENIZER_CONFIG_JSON OUT_JSON

Each template (Qwen2.5-Instruct's, the Qwen3 fixture's own, mempo's ChatML) is put into a
copy of the Qwen3 fixture's tokenizer_config.json beside its tokenizer.json, loaded with
AutoTokenizer, and every case rendered with and without add_generation_prompt, as text
and as token ids. model/chat's TestGoldens checks the Go renderer and tokenizer against
OUT_JSON (testdata/goldens.json); TestGoldensAreTransformers reruns this script where a
Python with transformers is found and compares.
"""

import json
import os
import sys
import tempfile

import transformers

HERE = os.path.dirname(os.path.abspath(__file__))


def templates(qwen3_config):
    with open(os.path.join(HERE, "qwen2.5-instruct.jinja"), encoding="utf-8") as f:
        qwen25 = f.read()
    with open(os.path.join(HERE, "mempo-chatml.jinja"), encoding="utf-8") as f:
        chatml = f.read()
    return {"qwen2.5-instruct": qwen25, "qwen3": qwen3_config["chat_template"], "mempo-chatml": chatml}


def copy_tokenizer(src, dst):
    """Copies tokenizer.json with its merges as "a b" strings, the form every tokenizers
    release reads (before 0.20 it rejects the [a, b] pairs the fixture holds)."""
    with open(src, encoding="utf-8") as f:
        data = json.load(f)
    merges = data["model"]["merges"]
    if merges and isinstance(merges[0], list):
        assert not any(" " in a or " " in b for a, b in merges), "a merge holds a space"
        data["model"]["merges"] = [a + " " + b for a, b in merges]
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tokenizer_json, config_json, out = sys.argv[1:]
    with open(config_json, encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    goldens = []
    with tempfile.TemporaryDirectory() as d:
        copy_tokenizer(tokenizer_json, os.path.join(d, "tokenizer.json"))
        for name, source in templates(config).items():
            config["chat_template"] = source
            with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, ensure_ascii=False)
            tok = transformers.AutoTokenizer.from_pretrained(d)
            for case in cases:
                for generate in (True, False):
                    kw = dict(add_generation_prompt=generate)
                    text = tok.apply_chat_template(case["messages"], tokenize=False, **kw)
                    ids = tok.apply_chat_template(case["messages"], tokenize=True, **kw)
                    goldens.append({"template": name, "case": case["name"], "generate": generate, "text": text, "ids": ids})
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "goldens": goldens}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
