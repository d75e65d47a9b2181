"""Check a tokenizer.json and expected ids against HF `tokenizers` (the Rust library).

    python3 -m venv /tmp/hf && /tmp/hf/bin/pip install tokenizers
    /tmp/hf/bin/python model/bpe/testdata/check_hf.py TOKENIZER_JSON CASES_JSON

CASES_JSON is {"cases": [{"text": ..., "ids": [...]}, ...]}: goldens.json with the Qwen3
fixture (checks that the JavaScript goldens are HF's ids), or the cases.json that
`go test ./model/bpe -run TestTrainHFExport -hfdir DIR` writes beside a trained
tokenizer.json (checks that HF loads what Train writes and encodes as Go does).
Exit status 1 lists every mismatch; not run by go test.
"""

import json
import sys

from tokenizers import Tokenizer


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tok = Tokenizer.from_file(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    bad = 0
    for i, case in enumerate(cases):
        got = tok.encode(case["text"], add_special_tokens=False).ids
        if got != case["ids"]:
            bad += 1
            print(f"case {i} {case['text']!r}:\n  hf   {got}\n  want {case['ids']}")
            continue
        text = tok.decode(got, skip_special_tokens=False)
        if "decoded" in case and text != case["decoded"]:
            bad += 1
            print(f"case {i} {case['text']!r}: hf decode {text!r}, want {case['decoded']!r}")
    print(f"{len(cases) - bad}/{len(cases)} cases match HF tokenizers", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
