"""Data preparation on CPU: time, tokens/s and peak RSS of tokenising a generated corpus into the cache, first run
and second run, and of `recipe run` to its first step; optionally the in-memory code it replaced (--baseline).

    .venv/bin/python benchmarks/data_prep.py --text-mb 20 --big-mb 200 --baseline /tmp/old_data.py

--baseline FILE: a copy of the former recipes/data.py (`git show 21e3871:recipes/data.py > FILE`); its
read_texts + token_blocks run on the same text corpus. Every measurement is a fresh process; peak RSS is
resource.getrusage's ru_maxrss of that process and, separately, the largest of its children (tokenising
workers, ranks). The tokenizer is the tiny model's (byte-level: one token per byte, the most tokens per MB).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_corpus(path: Path, mb: float, jsonl: bool, seed: int = 0) -> None:
    """Paragraphs of the shipped corpus in a seeded random order until `mb` MB: a .txt, or JSONL records."""
    from shardlab.recipes.data import embedded_corpus

    paragraphs = [p for p in embedded_corpus().split("\n\n") if p.strip()]
    rng, size, want = random.Random(seed), 0, int(mb * 1e6)
    with open(path, "w", encoding="utf-8") as f:
        while size < want:
            doc = "\n\n".join(rng.choice(paragraphs) for _ in range(8))
            line = json.dumps({"text": doc}) + "\n" if jsonl else doc + "\n\n"
            f.write(line)
            size += len(line.encode())


def _peaks() -> dict:
    self_, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"peak_rss_mb": self_.ru_maxrss / 1024, "children_peak_rss_mb": children.ru_maxrss / 1024}


def child(kind: str, corpus: str, cache: str, workers: int) -> dict:
    """One measurement, in this (fresh) process."""
    from shardlab.recipes.model import byte_tokenizer, initial_folder

    folder = initial_folder("tiny", 42)
    t0 = time.perf_counter()
    if kind == "new":
        from shardlab.recipes.data_cache import prepare_data

        built = prepare_data(corpus, "text", 128, folder, workers, Path(cache), "auto")  # what a default run asks
        out = {"built": built.built, "sequences": built.sequences, "tokens": built.meta["tokens"] + built.meta["truncated"]}
    else:  # the former in-memory path, from a copy of its file
        import importlib.util

        spec = importlib.util.spec_from_file_location("old_data", kind)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        blocks = old.token_blocks(old.read_texts(corpus), byte_tokenizer(), 128)
        out = {"sequences": len(blocks), "tokens": blocks.numel()}
    seconds = time.perf_counter() - t0
    return {**out, "seconds": seconds, "tokens_per_s": out["tokens"] / seconds, **_peaks()}


def run_child(kind: str, corpus: Path, cache: Path, workers: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(corpus), str(cache), str(workers)],
                          capture_output=True, text=True, env={**os.environ, "SHARDLAB_CACHE": str(cache)})
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def recipe_run(corpus: Path, cache: Path, output: Path, workers: int, devices: int = 1) -> dict:
    """`recipe run` on `devices` CPU ranks for two steps (one: as the issue measured): time to step 1, to the end,
    peak RSS of the largest process (the launcher or a rank), and whether the launcher tokenised (the data note)."""
    code = ("import json, subprocess, sys, time, resource\n"
            "t0 = time.perf_counter(); first = None\n"
            "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)\n"
            "data = ''\n"
            "for line in p.stdout:\n"
            "    if first is None and 'step 1/' in line: first = time.perf_counter() - t0\n"
            "    if 'data' in line and ('cache' in line or 'tokenis' in line): data += line.strip()[:300] + ' '\n"
            "p.wait(); r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(json.dumps({'rc': p.returncode, 'first_step_s': first, 'total_s': time.perf_counter() - t0,"
            " 'peak_rss_mb': r.ru_maxrss / 1024, 'data_note': data}))\n")
    recipe = Path(sys.executable).with_name("recipe")
    proc = subprocess.run([sys.executable, "-c", code, str(recipe), "run", "--accelerator", "cpu", "--devices", str(devices),
                           "--max-steps", "2", "--no-export", "--data", str(corpus), "--data-workers", str(workers),
                           "--output", str(output)],
                          capture_output=True, text=True, env={**os.environ, "SHARDLAB_CACHE": str(cache)})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text-mb", type=float, default=20, help="size of the .txt corpus (the issue's 20 MB)")
    parser.add_argument("--big-mb", type=float, default=200, help="size of the JSONL corpus (the issue's 1 GB, or less)")
    parser.add_argument("--workers", type=int, default=2, help="--data-workers")
    parser.add_argument("--big-ranks", type=int, default=0, help="then `recipe run --devices N` on the big corpus's cache")
    parser.add_argument("--baseline", help="a copy of the former recipes/data.py, to measure it on the text corpus")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.child[2], int(args.child[3]))))
        return
    with tempfile.TemporaryDirectory(prefix="data-prep-") as tmp:
        tmp = Path(tmp)
        text, big, cache = tmp / "corpus.txt", tmp / "big.jsonl", tmp / "cache"
        rows, runs, big_runs = [], [], []
        if args.text_mb:
            write_corpus(text, args.text_mb, jsonl=False)
            if args.baseline:
                rows.append((f"former in-memory code, {args.text_mb:g} MB .txt", run_child(args.baseline, text, cache, 1)))
            rows.append((f"tokenise to cache, {args.text_mb:g} MB .txt, first run", run_child("new", text, cache, args.workers)))
            rows.append((f"tokenise to cache, {args.text_mb:g} MB .txt, second run", run_child("new", text, cache, args.workers)))
            runs = [recipe_run(text, tmp / "cache-run", tmp / f"run{i}", args.workers) for i in (1, 2)]
        if args.big_mb:
            t0 = time.perf_counter()
            write_corpus(big, args.big_mb, jsonl=True, seed=1)
            print(f"wrote {big.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s", flush=True)
            rows.append((f"tokenise to cache, {args.big_mb:g} MB .jsonl, first run", run_child("new", big, cache, args.workers)))
            print(rows[-1], flush=True)
            if args.big_ranks:  # the ranks start from the cache the line above built (the run's own cache is the same)
                big_runs.append(recipe_run(big, cache, tmp / "big-run", args.workers, args.big_ranks))
    print(f"| measurement | seconds | tokens/s | peak RSS, process (MB) | peak RSS, largest child (MB) |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['seconds']:.2f} | {r['tokens_per_s']:,.0f} | {r['peak_rss_mb']:.0f} | {r['children_peak_rss_mb']:.0f} |")
    print()
    print("| `recipe run --devices 1 --max-steps 2 --no-export` on the .txt | to step 1 (s) | to the end (s) | peak RSS, largest process (MB) |")
    print("|---|---:|---:|---:|")
    for i, r in enumerate(runs, 1):
        print(f"| {'first' if i == 1 else 'second'} run (rc {r['rc']}) | {r['first_step_s']:.1f} | {r['total_s']:.1f} | {r['peak_rss_mb']:.0f} |")
    for r in big_runs:
        print(f"| {args.big_mb:g} MB .jsonl, `--devices {args.big_ranks}`, cache built above (rc {r['rc']}) | "
              f"{r['first_step_s'] or float('nan'):.1f} | {r['total_s']:.1f} | {r['peak_rss_mb']:.0f} |")
        print(f"data note: {r['data_note']}")


if __name__ == "__main__":
    main()
