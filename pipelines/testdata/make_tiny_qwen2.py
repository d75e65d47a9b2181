"""Write a tiny random Qwen2 checkpoint the way a user's transformers checkpoint comes.

    PYTHON make_tiny_qwen2.py TOKENIZER_JSON TOKENIZER_CONFIG_JSON CHAT_TEMPLATE OUT_DIR

transformers' Qwen2ForCausalLM with random weights (seed 0; 2 layers, hidden 32, 4
heads, 2 KV heads) over the tokenizer's whole vocabulary, saved with save_pretrained
(model.safetensors, config.json, generation_config.json), beside the tokenizer files:
tokenizer.json with its merges as "a b" strings (as Qwen2.5's own file holds them, and
as tokenizers releases before 0.20 read them) and tokenizer_config.json with CHAT_TEMPLATE
(a Jinja file) as its chat_template. The
own-data pipeline test (pipelines/own_test.go) trains it; without a Python that has
torch and transformers the test writes the same layout from Go instead.
"""

import json
import os
import sys

import torch
import transformers


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    tokenizer_json, tokenizer_config, template, out = sys.argv[1:]
    with open(tokenizer_json, encoding="utf-8") as f:
        vocab = json.load(f)
    size = max([v for v in vocab["model"]["vocab"].values()] + [t["id"] for t in vocab["added_tokens"]]) + 1
    with open(tokenizer_config, encoding="utf-8") as f:
        tconf = json.load(f)
    ids = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True, torch_dtype="float32",
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    model = transformers.Qwen2ForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    merges = vocab["model"]["merges"]
    if merges and isinstance(merges[0], list):
        vocab["model"]["merges"] = [a + " " + b for a, b in merges]
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(template, encoding="utf-8") as f:
        tconf["chat_template"] = f.read()
    tconf["eos_token"], tconf["pad_token"] = "<|im_end|>", "<|endoftext|>"
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tconf, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    main()
