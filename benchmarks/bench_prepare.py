"""``prepare-data data=hf``'s tokens per second against the tokenizer's own ``encode_batch``.

    python benchmarks/bench_prepare.py                # 200k documents, BPE 8192, 1 worker
    python benchmarks/bench_prepare.py --workers 4    # the same with 4 tokenizing processes
    python benchmarks/bench_prepare.py --quick        # a smoke run: 1k documents, BPE 512

Generates a jsonl corpus (documents of 20 to 400 random words drawn with Zipf-like weights)
and a byte-level BPE ``tokenizer.json`` trained on a sample of it, in a temporary folder.
Then, in the same run: ``tokenizers.Tokenizer.encode_batch`` over every text in batches of
1000 (the texts already in memory: the tokenizer's ceiling), and ``prepare_hf`` on the files
(reading them with ``datasets``, hashing, tokenizing, writing the shards); both count the
documents' tokens without the end-of-text ones. Prints both rates and their ratio, the
issue's bar. Offline: nothing reaches a network. Run it alone on the machine; record the
table with machine and date in RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")

from tokenizers import Tokenizer  # noqa: E402

from nvfp4_lab.data import DataConfig  # noqa: E402
from nvfp4_lab.data.hf_prepare import Manifest, prepare_hf  # noqa: E402
from nvfp4_lab.data.tokenizer import BPETokenizer  # noqa: E402


def corpus(n_docs: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [f"w{i}" + "abcdefghij"[i % 10] * (1 + i % 5) for i in range(5000)]
    weights = [1 / (i + 1) for i in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(20, 400))) + "."
            for _ in range(n_docs)]


def tokenizer(path: Path, texts: list[str], vocab: int) -> Tokenizer:
    BPETokenizer.train(texts, vocab).save(path)
    return Tokenizer.from_file(str(path))


def encode_rate(tok: Tokenizer, texts: list[str]) -> tuple[int, float]:
    t0, n = time.perf_counter(), 0
    for i in range(0, len(texts), 1000):
        n += sum(len(e.ids) for e in tok.encode_batch(texts[i:i + 1000],
                                                      add_special_tokens=False))
    return n, time.perf_counter() - t0


def prepare_rate(root: Path, data: Path, tok: Path, workers: int) -> tuple[int, float]:
    cfg = DataConfig(source="hf", name=str(data), tokenizer=str(tok), path=str(root / "out"),
                     shard_tokens=10_000_000, workers=workers)
    t0 = time.perf_counter()
    prepare_hf(cfg)
    wall = time.perf_counter() - t0
    m = Manifest.read(root / "out")
    return sum(s.tokens for s in m.splits.values()) - m.documents, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smoke run")
    p.add_argument("--docs", type=int, default=200_000)
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args()
    n_docs, vocab = (1000, 512) if args.quick else (args.docs, 8192)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        texts = corpus(n_docs)
        with open(root / "docs.jsonl", "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        tok = tokenizer(root / "tokenizer.json", texts[:20_000], vocab)
        enc_tokens, enc_s = encode_rate(tok, texts)
        prep_tokens, prep_s = prepare_rate(root, root / "docs.jsonl", root / "tokenizer.json",
                                           args.workers)
    assert prep_tokens == enc_tokens, (prep_tokens, enc_tokens)
    enc, prep = enc_tokens / enc_s, prep_tokens / prep_s
    print(f"{n_docs} documents, {enc_tokens:,} tokens, BPE {vocab}, {os.cpu_count()} cores, "
          f"workers={args.workers}")
    print(f"Tokenizer.encode_batch   {enc:12,.0f} tokens/s  ({enc_s:.2f} s)")
    print(f"prepare-data data=hf     {prep:12,.0f} tokens/s  ({prep_s:.2f} s)")
    print(f"ratio                    {prep / enc:12.2f}")


if __name__ == "__main__":
    main()
