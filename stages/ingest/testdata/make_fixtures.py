"""Write the verl-style Parquet fixtures that stages/ingest tests import.

They come from pyarrow, a different Arrow implementation than the Go reader, and
follow the two layouts users have:

- search_r1.parquet: Search-R1's nq/hotpotqa files (scripts/data_process/*_search.py):
  the original id/question/golden_answers columns, plus data_source, a chat `prompt`
  list of {role, content}, ability, reward_model = {style, ground_truth: {target:
  [aliases]}} and extra_info = {split, index}.
- verl_plain.parquet: verl's own example layout (e.g. gsm8k.py) with large_string
  columns as HF datasets writes them, no question column (the question is inside
  the user message after "Question:"), reward_model.ground_truth a plain string and
  extra_info without split.

Run from this directory:  python3 make_fixtures.py   (pyarrow >= 12)
"""
import pyarrow as pa
import pyarrow.parquet as pq

TEMPLATE = ("Answer the given question. You must conduct reasoning inside <think> and </think> "
            "first every time you get new information. ... Question: {q}\n")

SEARCH_R1 = [
    ("nq", "train_0", "who wrote the play hamlet", ["William Shakespeare", "Shakespeare"]),
    ("nq", "train_1", "what is the capital city of australia", ["Canberra"]),
    ("hotpotqa", "train_2", "which river flows through the city where the eiffel tower stands",
     ["Seine", "the Seine", "River Seine"]),
    ("nq", "train_3", "how many strings does a standard violin have", ["four", "4"]),
    ("hotpotqa", "train_4", "who directed the film that won best picture in 1998", ["James Cameron"]),
    ("nq", "train_5", "what element has the chemical symbol fe", ["iron"]),
    ("nq", "train_6", "in which year did the berlin wall fall", ["1989"]),
]


def search_r1():
    rows = {k: [] for k in ["id", "question", "golden_answers", "data_source", "prompt", "ability",
                            "reward_model", "extra_info"]}
    for i, (src, id_, q, golds) in enumerate(SEARCH_R1):
        rows["id"].append(id_)
        rows["question"].append(q)
        rows["golden_answers"].append(golds)
        rows["data_source"].append(src)
        rows["prompt"].append([{"role": "user", "content": TEMPLATE.format(q=q)}])
        rows["ability"].append("fact-reasoning")
        rows["reward_model"].append({"style": "rule", "ground_truth": {"target": golds}})
        rows["extra_info"].append({"split": "train", "index": i})
    schema = pa.schema([
        ("id", pa.string()),
        ("question", pa.string()),
        ("golden_answers", pa.list_(pa.string())),
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()),
                                    ("ground_truth", pa.struct([("target", pa.list_(pa.string()))]))])),
        ("extra_info", pa.struct([("split", pa.string()), ("index", pa.int64())])),
    ])
    pq.write_table(pa.Table.from_pydict(rows, schema=schema), "search_r1.parquet", compression="snappy")


def verl_plain():
    qs = [("what is 2 plus 3", "5"), ("name the largest planet", "Jupiter"), ("what colour is the sky", "blue")]
    rows = {"data_source": [], "prompt": [], "ability": [], "reward_model": [], "extra_info": []}
    for i, (q, a) in enumerate(qs):
        rows["data_source"].append("toy")
        rows["prompt"].append([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Answer briefly.\nQuestion: {q}\n"},
        ])
        rows["ability"].append("qa")
        rows["reward_model"].append({"style": "rule", "ground_truth": a})
        rows["extra_info"].append({"index": i})
    ls = pa.large_string()
    schema = pa.schema([
        ("data_source", ls),
        ("prompt", pa.large_list(pa.struct([("content", ls), ("role", ls)]))),
        ("ability", ls),
        ("reward_model", pa.struct([("ground_truth", ls), ("style", ls)])),
        ("extra_info", pa.struct([("index", pa.int64())])),
    ])
    pq.write_table(pa.Table.from_pydict(rows, schema=schema), "verl_plain.parquet", compression="zstd")


if __name__ == "__main__":
    search_r1()
    verl_plain()
