#!/usr/bin/env python3
"""Counts the tokens of each sample text under public tokenizers.

Writes crates/agent/tests/data/token_samples/counts.json, which the agent's
test `tokens::the_estimate_is_never_below_the_tokenizers_nor_far_above`
(crates/agent/tests/tokens.rs) reads: the estimate
(`homeagent_agent::tokens`) must not fall below any of the modern
tokenizers' counts, nor far above them. Run again after adding a sample.

The tokenizers' vocabularies are read from local files, so it runs offline:
the `litellm` Python package ships OpenAI's cl100k_base and o200k_base
(tiktoken's cache files, named by the SHA-1 of their URL) and the DeepSeek
and early Anthropic tokenizers (Hugging Face `tokenizer.json`):

    python3 -m venv /tmp/tok && /tmp/tok/bin/pip install tiktoken tokenizers
    /tmp/tok/bin/pip download --no-deps litellm -d /tmp/tok/wheel
    unzip -q /tmp/tok/wheel/litellm-*.whl 'litellm/litellm_core_utils/tokenizers/*' -d /tmp/tok
    /tmp/tok/bin/python scripts/token-samples/measure.py /tmp/tok/litellm/litellm_core_utils/tokenizers
"""

import json
import os
import sys
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "crates/agent/tests/data/token_samples"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: measure.py DIR  (the directory holding the tokenizer files, see the docstring)")
    vocab = Path(sys.argv[1])
    os.environ["TIKTOKEN_CACHE_DIR"] = str(vocab)
    import tiktoken
    from tokenizers import Tokenizer

    cl100k = tiktoken.get_encoding("cl100k_base")
    o200k = tiktoken.get_encoding("o200k_base")
    deepseek = Tokenizer.from_file(str(vocab / "deepseek_tokenizer.json"))
    claude2 = Tokenizer.from_file(str(vocab / "anthropic_tokenizer.json"))
    counts = {}
    for path in sorted(SAMPLES.glob("*.txt")):
        # The test trims the same way before it estimates.
        text = path.read_text(encoding="utf-8").strip()
        counts[path.name] = {
            "cl100k": len(cl100k.encode(text)),
            "o200k": len(o200k.encode(text)),
            "deepseek": len(deepseek.encode(text).ids),
            "claude2": len(claude2.encode(text).ids),
        }
    out = SAMPLES / "counts.json"
    out.write_text(json.dumps(counts, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(counts)} samples)")


if __name__ == "__main__":
    main()
