"""Check that mempo shards open in pyarrow as ordinary Parquet with readable types.

Run from the repository root after `go test ./format -update` has written the golden
shards:  python3 format/testdata/check_pyarrow.py
It reads every format/testdata/<kind>.parquet, checks the key-value metadata, the
compression and that no column needs an extension type, and prints each schema.
"""
import pathlib
import sys

import pyarrow as pa
import pyarrow.parquet as pq

HERE = pathlib.Path(__file__).parent
KINDS = ["prompts", "rollouts", "scores", "logprobs", "advantages", "metrics"]

# Column types an auditor relies on, per kind (a subset; the Go tests pin the rest).
EXPECT = {
    "prompts": {"uid": pa.string(), "golds": pa.list_(pa.list_(pa.string())), "source_index": pa.list_(pa.int64())},
    "rollouts": {"prompt_ids": pa.list_(pa.int32()), "response_ids": pa.list_(pa.int32()),
                 "sampling_logprobs": pa.list_(pa.float32()), "mem_start": pa.int32(), "action": pa.string()},
    "scores": {"em": pa.list_(pa.float32()), "f1": pa.list_(pa.float32()), "format_ok": pa.bool_(),
               "reward": pa.float32(), "tt": pa.int64()},
    "logprobs": {"old_logprobs": pa.list_(pa.float32()), "p_mem": pa.float32(), "p_ctx": pa.float32()},
    "advantages": {"advantages": pa.list_(pa.float32()), "adv_memory": pa.float32()},
    "metrics": {"value": pa.float64(), "name": pa.string()},
}


def same_type(got, want):
    # List element field names differ between writers ("item" vs "element").
    if pa.types.is_list(want):
        return pa.types.is_list(got) and same_type(got.value_type, want.value_type)
    return got == want


def main():
    bad = 0
    for kind in KINDS:
        path = HERE / f"{kind}.parquet"
        f = pq.ParquetFile(path)
        meta = f.schema_arrow.metadata or {}
        if meta.get(b"mempo.kind") != kind.encode() or meta.get(b"mempo.schema_version") is None:
            print(f"{path}: metadata {meta!r}, want mempo.kind={kind}")
            bad += 1
        codecs = {f.metadata.row_group(0).column(i).compression for i in range(f.metadata.num_columns)}
        if codecs != {"ZSTD"}:
            print(f"{path}: compression {codecs}, want ZSTD")
            bad += 1
        table = f.read()
        for name, want in EXPECT[kind].items():
            got = table.schema.field(name).type
            if not same_type(got, want):
                print(f"{path}: column {name!r}: {got}, want {want}")
                bad += 1
        print(f"{kind}: {table.num_rows} rows, {f.metadata.num_row_groups} row groups")
        print("  " + str(table.schema.remove_metadata()).replace("\n", "\n  "))
        print("  first row:", table.slice(0, 1).to_pylist()[0])
    if bad:
        print(f"{bad} problems")
        sys.exit(1)
    print("ok: all shards readable by pyarrow", pa.__version__)


if __name__ == "__main__":
    main()
