"""Resume under another strategy and world size from a checkpoint's portable copy (recipes/portable.py).

Every ordered pair of the four families (ddp, zero2, zero3, fsdp), tiny Llama-3 shape (tied embeddings), fp32,
CPU over gloo, a global batch of 4 sequences of 32 tokens split differently on each side: a source trains 8 steps with
a checkpoint at step 4; each target resumes that checkpoint under another family on another world size and trains
steps 5-8. Its losses must equal the source's uninterrupted ones within 1e-5 (measured: <= 1.8e-7), and its step-8
weights and Adam moments must be as close to the source's as the four families' own uninterrupted runs are to
each other (x1.5, or within 1e-6): the families round their reductions differently, so two uninterrupted fp32 runs of
ddp and zero2 already differ by 1.0e-6 in the weights and 6.4e-5 in exp_avg_sq (relative, by norm, the final norm's;
2.7e-6 and 6.1e-7 between zero2 and zero3; the resumed runs measured at most 0.56 of what is allowed). The offload
presets take part once as source (zero3_offload) and once as target (fsdp_offload). The runs share five launches
(tests/recipes/portable_ranks.py): a launch per world size in the order the checkpoints exist."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# name: (strategy, world size, micro-batch, accumulation, source or None); global batch 4 everywhere
SOURCES = {"ddp": ("ddp", 4, 1, 1), "zero2": ("zero2", 2, 1, 2), "zero3": ("zero3_offload", 1, 1, 4),
           "fsdp": ("fsdp", 2, 2, 1)}
TARGETS = {  # (source family, target family): (strategy, world size, micro-batch, accumulation)
    ("ddp", "zero2"): ("zero2", 2, 1, 2), ("ddp", "zero3"): ("zero3", 1, 1, 4), ("ddp", "fsdp"): ("fsdp", 2, 2, 1),
    ("zero2", "ddp"): ("ddp", 4, 1, 1), ("zero2", "zero3"): ("zero3", 4, 1, 1), ("zero2", "fsdp"): ("fsdp", 1, 1, 4),
    ("zero3", "ddp"): ("ddp", 2, 1, 2), ("zero3", "zero2"): ("zero2", 4, 1, 1),
    ("zero3", "fsdp"): ("fsdp_offload", 2, 2, 1),
    ("fsdp", "ddp"): ("ddp", 1, 2, 2), ("fsdp", "zero2"): ("zero2", 1, 1, 4), ("fsdp", "zero3"): ("zero3", 4, 1, 1),
}
# launches in the order their checkpoints exist: (world size, sources, targets)
LAUNCHES = [(4, ["ddp"], []), (2, ["zero2", "fsdp"], [("ddp", "zero2"), ("ddp", "fsdp")]),
            (1, ["zero3"], [("ddp", "zero3"), ("zero2", "fsdp"), ("fsdp", "ddp"), ("fsdp", "zero2")]),
            (4, [], [("zero2", "ddp"), ("zero2", "zero3"), ("zero3", "zero2"), ("fsdp", "zero3")]),
            (2, [], [("zero3", "ddp"), ("zero3", "fsdp")])]


# 32 tokens a sequence, not the shape's default 128: the 128k-vocabulary logits are most of a step's work, and what
# is checked (the state a checkpoint carries across families and world sizes) does not depend on their length
SEQ_LEN = 32

# runs that also write the end-of-run hf/ export, for `recipe export` of their step-8 checkpoint to match:
# FSDP on 2 ranks and ZeRO-3 on 4
EXPORTED = ("src-fsdp", "fsdp-to-zero3")
# the source whose step-4 checkpoint the refusals resume from
REFUSED_FROM = "ddp"


def _prepared(out: Path, strategy: str, world: int, micro: int, accum: int, resume: Path | None) -> Path:
    from shardlab.core.config import RunConfig
    from shardlab.recipes.run import prepare

    cfg = RunConfig(model="tiny-llama3", strategy=strategy, accelerator="cpu", devices=world, micro_batch_size=micro,
                    grad_accum=accum, seq_len=SEQ_LEN, max_steps=8, checkpoint_every=4, keep_checkpoints=2,
                    export=out.name in EXPORTED, metrics="none", output=str(out),
                    resume=str(resume) if resume else None)
    p = prepare(cfg)
    out.mkdir(parents=True, exist_ok=True)
    p.save(out / ".prepared.pt")
    return out / ".prepared.pt"


@pytest.fixture(scope="module")
def matrix(cache_dir, module_folder) -> dict:
    root = module_folder("portable")
    env = {**os.environ, "SHARDLAB_CACHE": str(cache_dir), "PYTHONUNBUFFERED": "1"}
    old = os.environ.get("SHARDLAB_CACHE")
    os.environ["SHARDLAB_CACHE"] = str(cache_dir)
    try:
        for i, (world, sources, targets) in enumerate(LAUNCHES):
            files = [_prepared(root / f"src-{s}", *SOURCES[s], None) for s in sources]
            files += [_prepared(root / f"{a}-to-{b}", *TARGETS[(a, b)], root / f"src-{a}" / "checkpoints" / "step-000004")
                      for a, b in targets]
            proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   f"--nproc-per-node={world}", "-m", "tests.recipes.portable_ranks", *map(str, files)],
                                  capture_output=True, text=True, env=env, timeout=900)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
            _trimmed(root, sources, targets, LAUNCHES[i + 1:])
    finally:
        os.environ.pop("SHARDLAB_CACHE") if old is None else os.environ.__setitem__("SHARDLAB_CACHE", old)
    from shardlab.recipes.portable import KINDS, Reader

    finals = [Reader(root / f"src-{s}" / "checkpoints" / "step-000008" / "portable") for s in SOURCES]
    spread = {k: max(_worst(x, y, k) for x in finals for y in finals if x is not y) for k in KINDS}
    return {"root": root, "spread": spread}


def _trimmed(root: Path, sources: list[str], targets: list[tuple[str, str]], later: list) -> None:
    """What no later launch or test reads goes as soon as a launch is done (the matrix held 5.4 GB at once, the most
    of the test session): a run's native state at step 8 (the tests read its portable copy), but for the EXPORTED
    runs that `recipe export` reads; a source's step-4 checkpoint once every target resumed from it, but for the one
    the refusals resume from."""
    for run in [f"src-{s}" for s in sources] + [f"{a}-to-{b}" for a, b in targets]:
        if run not in EXPORTED:
            state = root / run / "checkpoints" / "step-000008" / "state"  # a file, or a folder of the ranks' shards
            shutil.rmtree(state) if state.is_dir() else state.unlink()
    resumed_later = {a for _, _, pairs in later for a, _ in pairs}
    for source in {a for a, _ in TARGETS} - resumed_later - {REFUSED_FROM}:
        shutil.rmtree(root / f"src-{source}" / "checkpoints" / "step-000004", ignore_errors=True)


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


@pytest.mark.parametrize("pair", list(TARGETS), ids=lambda p: f"{p[0]}-to-{p[1]}")
def test_resume_under_another_family_and_world_size(matrix, pair):
    from shardlab.recipes.portable import KINDS, Reader

    a, b = pair
    src, dst = matrix["root"] / f"src-{a}", matrix["root"] / f"{a}-to-{b}"
    want, got = _summary(src), _summary(dst)
    assert got["resumed_through"] == "portable copy" and got["world_size"] == TARGETS[pair][1]
    assert len(got["losses"]) == 8 and got["losses"][:4] == want["losses"][:4]  # steps 1-4: carried in the checkpoint
    for x, y in zip(got["losses"][4:], want["losses"][4:]):
        assert abs(x - y) <= 1e-5 * abs(y), (got["losses"], want["losses"])
    final = lambda run: Reader(run / "checkpoints" / "step-000008" / "portable")  # noqa: E731
    resumed, source = final(dst), final(src)
    assert resumed.names == source.names and resumed.step == source.step == 8
    for kind in KINDS:
        got = _worst(resumed, source, kind)
        assert got <= max(1e-6, 1.5 * matrix["spread"][kind]), (pair, kind, got, matrix["spread"])


def _worst(x, y, kind: str) -> float:
    """The largest |x - y| / |y| (by norm) over the parameters of two portable copies, for one kind of tensor."""
    return max(float((x.read(kind, n) - y.read(kind, n)).norm() / y.read(kind, n).norm().clamp_min(1e-30))
               for n in y.names)


@pytest.mark.parametrize("run", EXPORTED)
def test_export_of_a_checkpoint_is_the_end_of_run_export(matrix, in_process, tmp_path, run):
    from safetensors.torch import load_file

    ckpt = matrix["root"] / run / "checkpoints" / "step-000008"
    rc, out, err = in_process("export", ckpt, "--output", tmp_path / "hf")
    assert rc == 0 and "exported step 8" in out, err
    got = {k: v for f in (tmp_path / "hf").glob("*.safetensors") for k, v in load_file(f).items()}
    want = {k: v for f in (matrix["root"] / run / "hf").glob("*.safetensors") for k, v in load_file(f).items()}
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert (tmp_path / "hf" / "tokenizer.json").exists() and (tmp_path / "hf" / "config.json").exists()
    rc, _, err = in_process("export", ckpt, "--output", tmp_path / "hf")  # not over an existing export
    assert rc == 2 and "exists and is not an empty folder" in err


@pytest.mark.parametrize("flags, says", [
    (("--devices", "3"), "4 sequences do not divide over 3 ranks"),
    (("--devices", "2", "--micro-batch-size", "1"), "use --grad-accum 2"),
    (("--devices", "2"), "use --micro-batch-size 2 --grad-accum 1 (or any micro-batch x accumulation = 2)"),
    (("--devices", "2", "--precision", "bf16-mixed"), "written with precision '32-true'"),
])
def test_a_resume_that_cannot_continue_the_run_is_one_line(matrix, in_process, flags, says):
    ckpt = matrix["root"] / f"src-{REFUSED_FROM}" / "checkpoints" / "step-000004"
    before = sorted((p.name, p.stat().st_size) for p in ckpt.rglob("*"))
    rc, _, err = in_process("run", "--model", "tiny-llama3", "--strategy", "fsdp", "--accelerator", "cpu", "--seq-len",
                            SEQ_LEN, "--max-steps", "8", "--resume", ckpt, "--output", matrix["root"] / "refused",
                            *flags)
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert sorted((p.name, p.stat().st_size) for p in ckpt.rglob("*")) == before
    assert not (matrix["root"] / "refused").exists()
