"""Resume keeps everything (issue 19): a resumed run continues metrics.csv and the TensorBoard folder, and a
corrupt or incomplete checkpoint is refused in one line before any rank starts, naming the newest intact
one, with OUTPUT left byte-identical. One real 6-step FSDP run (2 CPU ranks, a checkpoint every 2 steps)
is copied and broken per test; one real resume continues it."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from shardlab.core.errors import UserError
from shardlab.recipes import checkpoint
from shardlab.recipes.logs import ContinuedCSVLogger

FLAGS = ("--strategy", "fsdp", "--accelerator", "cpu", "--devices", "2", "--no-export", "--metrics", "both",
         "--checkpoint-every", "2", "--keep-checkpoints", "3")


@pytest.fixture(scope="module")
def finished(recipe, module_folder) -> Path:
    """OUTPUT of a finished 6-step run: checkpoints at steps 2, 4 and 6, metrics.csv and a TensorBoard folder."""
    out = module_folder("resume-integrity") / "run"
    proc = recipe("run", *FLAGS, "--max-steps", "6", "--output", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture
def out(finished, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _snapshot(folder: Path) -> dict[str, str]:
    """Every folder and file under folder, files by content hash."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            found[os.path.relpath(os.path.join(root, d), folder) + "/"] = ""
        for f in files:
            path = os.path.join(root, f)
            found[os.path.relpath(path, folder)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


def _ckpt(out: Path, step: int) -> Path:
    return out / "checkpoints" / f"step-{step:06d}"


def _truncate_shard(out):
    shard = _ckpt(out, 6) / "state" / "__1_0.distcp"
    os.truncate(shard, shard.stat().st_size // 2)
    return _ckpt(out, 6), "rank 1's shard state/__1_0.distcp is truncated"


def _delete_shard(out):
    (_ckpt(out, 6) / "state" / "__1_0.distcp").unlink()
    return _ckpt(out, 6), "rank 1's shard state/__1_0.distcp is missing"


def _delete_manifest(out):  # the manifest is meta.json's "files", and meta.json is written last
    (_ckpt(out, 6) / "meta.json").unlink()
    return _ckpt(out, 6), "no meta.json: its writer was killed or the copy is incomplete"


def _still_being_written(out):
    tmp = out / "checkpoints" / ".step-000006.tmp"
    _ckpt(out, 6).rename(tmp)
    return tmp, "the checkpoint is still being written, or its writer was killed"


def _changed_in_place(out):
    shard = _ckpt(out, 6) / "state" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    return _ckpt(out, 6), "rank 0's shard state/__0_0.distcp changed after it was written"


def _rng_missing(out):
    (_ckpt(out, 6) / "rng-rank1.pt").unlink()
    return _ckpt(out, 6), "rank 1's RNG state rng-rank1.pt is missing"


BREAKS = {"truncated shard": _truncate_shard, "a rank's shard missing": _delete_shard,
          "no manifest": _delete_manifest, "still being written": _still_being_written,
          "shard changed in place": _changed_in_place, "a rank's RNG file missing": _rng_missing}


@pytest.mark.parametrize("kind", list(BREAKS))
def test_a_broken_checkpoint_is_one_line_naming_the_newest_intact_and_touches_nothing(kind, out, cache_dir, capsys,
                                                                                      monkeypatch):
    """`recipe run --resume BROKEN` through cli.main in this process (what the `recipe` command runs)."""
    from shardlab.recipes import cli

    broken, why = BREAKS[kind](out)
    before = _snapshot(out)
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    rc = cli.main(["run", *FLAGS, "--max-steps", "8", "--output", str(out), "--resume", str(broken)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    [line] = err.strip().splitlines()
    assert line.startswith(f"recipe: error: --resume {broken}: incomplete or corrupt (") and why in line, line
    assert line.endswith(f"); the newest intact checkpoint is step-000004: use --resume {_ckpt(out, 4)}"), line
    assert _snapshot(out) == before


def test_a_failed_resume_stops_before_any_rank_starts(out, recipe):
    """A real `recipe run`: exit 2 with one line, no rank started, OUTPUT byte-identical (metrics.csv included)."""
    broken, why = _truncate_shard(out)
    before = _snapshot(out)
    t0 = time.time()
    proc = recipe("run", *FLAGS, "--max-steps", "8", "--output", out, "--resume", broken)
    took = time.time() - t0
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("recipe: error:")]
    assert len(errors) == 1 and why in errors[0] and f"--resume {_ckpt(out, 4)}" in errors[0]
    assert "Traceback" not in proc.stderr and "Initializing distributed" not in proc.stderr
    assert "shardlab: fsdp on 2" not in proc.stdout  # announced only once the run is prepared
    assert _snapshot(out) == before
    assert took < 120, took


def test_latest_skips_a_broken_newer_checkpoint_and_says_so(out):
    _truncate_shard(out)
    path, warning = checkpoint.resolve_resume("latest", out)
    assert path == _ckpt(out, 4)
    assert warning.startswith("--resume: passed over incomplete or corrupt step-000006 (rank 1's shard")
    assert warning.endswith("; resuming from step-000004")
    assert checkpoint.resolve_resume(str(out / "checkpoints"), out) == (path, warning)  # a checkpoints/ folder alike


def test_latest_with_no_intact_checkpoint_says_start_over(out):
    for step in (2, 4, 6):
        (_ckpt(out, step) / "rng-rank0.pt").unlink()
    with pytest.raises(UserError) as e:
        checkpoint.resolve_resume("latest", out)
    assert str(e.value) == (f"--resume: no intact checkpoint under {out / 'checkpoints'} (the newest, step-000006, is "
                            f"incomplete or corrupt: rank 0's RNG state rng-rank0.pt is missing); start without --resume")
    with pytest.raises(UserError, match=r"incomplete or corrupt .*; no intact checkpoint under .*: start without --resume$"):
        checkpoint.resolve_resume(str(_ckpt(out, 4)), out)


def test_a_checkpoint_from_before_manifests_is_taken_when_readable(out):
    """meta.json without "files" (written before this change): intact when its files are there and load."""
    for step in (4, 6):
        meta = json.loads((_ckpt(out, step) / "meta.json").read_text())
        del meta["files"]
        (_ckpt(out, step) / "meta.json").write_text(json.dumps(meta))
    assert checkpoint.problem(_ckpt(out, 6)) is None
    rng = _ckpt(out, 6) / "rng-rank1.pt"
    os.truncate(rng, rng.stat().st_size - 100)
    assert checkpoint.problem(_ckpt(out, 6)) == "rank 1's RNG state rng-rank1.pt is not a readable torch file"
    assert checkpoint.resolve_resume("latest", out)[0] == _ckpt(out, 4)


def test_a_checkpoint_of_another_model_shape_names_its_model(finished):
    path = _ckpt(finished, 4)
    meta = json.loads((path / "meta.json").read_text())
    other = {**{k: meta[k] for k in checkpoint.MUST_MATCH}, "model": "llama-1b",
             "model_shape": {**meta["model_shape"], "hidden_size": 2048, "num_hidden_layers": 16}}
    with pytest.raises(UserError) as e:
        checkpoint.check_resume(path, other, max_steps=8)
    assert str(e.value) == (f"--resume {path}: written for a model of another shape (hidden "
                            f"{meta['model_shape']['hidden_size']}, {meta['model_shape']['num_hidden_layers']} layers, "
                            f"vocab {meta['model_shape']['vocab_size']}) than --model llama-1b (hidden 2048, 16 layers, "
                            f"vocab {meta['model_shape']['vocab_size']}); use --model tiny")


def test_another_layout_of_the_backends_form_resumes_from_the_portable_copy(out):
    """The same strategy and world size, but another Strategy.checkpoint_layout (zero3's sub_group_size): the portable
    copy, or one line where there is none. A checkpoint from before layouts were recorded counts as another layout
    where the run has one (zero3 then stepped in one sub-group), as the same where it has none (ddp, fsdp)."""
    path = _ckpt(out, 4)
    meta = json.loads((path / "meta.json").read_text())
    run = {**{k: meta[k] for k in (*checkpoint.MUST_MATCH, "strategy", "world_size", "micro_batch_size", "grad_accum",
                                   "model", "model_shape")}}
    written = {"sub_group_size": 10**12}
    (path / "meta.json").write_text(json.dumps({**meta, "layout": written}))
    assert checkpoint.check_resume(path, {**run, "layout": written}, max_steps=8) is False  # its own form
    assert checkpoint.check_resume(path, {**run, "layout": {"sub_group_size": 2 * 10**8}}, max_steps=8) is True
    (path / "meta.json").write_text(json.dumps(meta))  # no "layout": written before they were recorded
    assert checkpoint.check_resume(path, {**run, "layout": {}}, max_steps=8) is False
    assert checkpoint.check_resume(path, {**run, "layout": {"sub_group_size": 2 * 10**8}}, max_steps=8) is True
    (path / "meta.json").write_text(json.dumps({**meta, "layout": written}))
    shutil.rmtree(path / "portable")
    with pytest.raises(UserError) as e:
        checkpoint.check_resume(path, {**run, "layout": {"sub_group_size": 2 * 10**8}}, max_steps=8)
    assert str(e.value) == (f"--resume {path}: written by fsdp with sub_group_size 1000000000000 and without a portable "
                            f"copy (--no-portable-checkpoints); this run has sub_group_size 200000000, which cannot load "
                            f"the backend's own form; resume with the settings that wrote it (its --experiments and "
                            f"--deepspeed-config)")


def test_the_manifest_lists_every_file_the_ranks_wrote(finished):
    path = _ckpt(finished, 6)
    files = json.loads((path / "meta.json").read_text())["files"]
    on_disk = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and p.name != "meta.json")
    assert sorted(files) == on_disk and "state/__1_0.distcp" in files and "rng-rank1.pt" in files
    assert files["state/__1_0.distcp"] == checkpoint.fingerprint(path / "state" / "__1_0.distcp")


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_logger_deletes_nothing_before_a_step_and_a_fresh_run_replaces_the_rows(finished, tmp_path):
    """In this process: Lightning's CSVLogger deleted metrics.csv when it opened it; ours waits for a step."""
    out = tmp_path / "run"
    shutil.copytree(finished / "logs", out / "logs")
    metrics = out / "logs" / "csv" / "metrics.csv"
    before = metrics.read_bytes()
    logger = ContinuedCSVLogger(out)
    logger.experiment  # what the Trainer does at setup, before the checkpoint loads
    logger.save()
    assert metrics.read_bytes() == before
    logger.log_metrics({"loss": 9.0, "lr": 0.1, "step_s": 1.0, "tokens_per_s": 1.0}, step=1)  # a fresh run's first step
    assert [r["step"] for r in _rows(metrics)] == ["1"] and _rows(metrics)[0]["loss"] == "9.0"


def test_a_resumed_run_continues_metrics_and_tensorboard(out, recipe):
    """The real resume: `--resume` (latest) passes over a broken step-000006, continues from step-000004 to 8."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _truncate_shard(out)
    logs_before = _snapshot(out / "logs")
    csv_before = (out / "logs" / "csv" / "metrics.csv").read_text().splitlines()
    proc = recipe("run", *FLAGS, "--max-steps", "8", "--output", out, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("recipe: warning: --resume: passed over incomplete or corrupt step-000006 (rank 1's shard "
            "state/__1_0.distcp is truncated") in proc.stderr
    assert json.loads((out / "summary.json").read_text())["resumed_from"] == str(_ckpt(out, 4))

    lines = (out / "logs" / "csv" / "metrics.csv").read_text().splitlines()
    assert lines[:5] == csv_before[:5]  # the header and steps 1-4 as the first run wrote them
    assert [r["step"] for r in _rows(out / "logs" / "csv" / "metrics.csv")] == [str(s) for s in range(1, 9)]
    assert sum(line.startswith("loss,") for line in lines) == 1

    logs_after = _snapshot(out / "logs")
    kept = {k: v for k, v in logs_after.items() if k in logs_before}
    assert kept.keys() == logs_before.keys()  # nothing deleted
    assert {k: v for k, v in kept.items() if not k.endswith("metrics.csv")} == \
           {k: v for k, v in logs_before.items() if not k.endswith("metrics.csv")}  # event files untouched
    assert len([k for k in logs_after if "tfevents" in k]) == 2
    events = EventAccumulator(str(out / "logs" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == list(range(1, 9))  # steps 5-6 of the first run hidden
