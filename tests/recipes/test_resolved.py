"""One resolved run: what `recipe plan` prints is what `recipe run` does, built once in the launching process."""
from __future__ import annotations

import json
import os
import time

import pytest

from shardlab.core.config import RunConfig
from shardlab.core.errors import UserError
from shardlab.recipes.plan import plan
from shardlab.recipes.run import prepare

CPU = dict(accelerator="cpu", devices=2)
GPU_80 = dict(accelerator="gpu", gpus=1, gpu_memory_gib=80, cpu_memory_gib=512)


def test_a_2_rank_run_resolves_and_tokenises_once_and_plan_says_what_it_did(auto_run, in_process):
    # `recipe run --strategy auto ... --max-steps 2 --no-export` under SHARDLAB_TRACE (tests/recipes/conftest.py; also
    # test_plan.py's run of auto end to end)
    flags, proc, output = auto_run["flags"], auto_run["proc"], auto_run["flags"][-1]
    events = [line.split()[0] for line in auto_run["trace"].read_text().splitlines()]
    # the launcher resolves and prepares the data once (tokenising it unless the cache has it); the ranks read its file
    assert events.count("resolve") == 1 and events.count("data") == 1 and events.count("tokenise") <= 1, events
    # the first step's gradients were freed right after its optimizer step, not during step 2's forward
    assert "forward-with-gradients" not in events, events
    assert not (output / ".prepared.pt").exists()  # the hand-off to the ranks is gone afterwards
    written = json.loads((output / "resolved.json").read_text())
    rc, out, err = in_process("plan", *flags, "--no-export", "--json")  # plan starts no process: in this one
    assert rc == 0, err
    planned = json.loads(out)["resolved"]
    assert planned == written  # field for field, hardware and decisions included
    summary = json.loads((output / "summary.json").read_text())
    assert summary["config"] == written["config"] and summary["auto"] == written["auto"]
    # what --strategy auto chose on CPU, said before training, and ran
    assert "--strategy auto chose fsdp" in proc.stdout and summary["strategy"] == "fsdp" and summary["auto"]["reasons"]
    assert summary["memory_estimate"]["gpu_bytes"] > 0 and len(summary["peak_memory_bytes"]) == 2


@pytest.mark.parametrize("cfg", [
    dict(strategy="ddp", **CPU),
    dict(strategy="zero3", precision="bf16-mixed", activation_checkpointing=True, **CPU),
    dict(strategy="fsdp", model="tiny-llama3", micro_batch_size="auto", global_batch_size=256, **CPU),
])
def test_plan_resolves_what_run_prepares(cfg, cache_dir, monkeypatch):
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    c = RunConfig(**cfg)
    assert plan(c) == prepare(c).run


def test_defaults_fit_the_model_and_the_machine():
    r = plan(RunConfig(strategy="auto", model="llama-1b", **GPU_80))
    c = r.config
    assert c.seq_len == 2048 and c.kernels in ("torch", "liger") and c.compile is not None  # nothing left unset
    assert c.micro_batch_size == r.largest_micro_batch > 1  # GPU default: the largest the estimate fits
    assert any(d.startswith("micro-batch ") for d in r.decisions) and any(d.startswith("sequence length 2048") for d in r.decisions)
    assert plan(RunConfig(model="tiny", **CPU)).config.seq_len == 128  # the tiny test shapes keep 128
    probed = plan(RunConfig(model="llama-1b", accelerator="gpu", gpus=8, gpu_memory_gib=80)).hardware.describe()
    assert "GPU(s) (given)" in probed and "CPU memory per node (probed)" in probed  # not "as given" for what was probed


def test_global_batch_size_with_micro_batch_auto_on_cpu():
    c = plan(RunConfig(strategy="ddp", micro_batch_size="auto", global_batch_size=96, model="tiny", **CPU)).config
    assert c.micro_batch_size * c.grad_accum * c.devices == 96 and c.grad_accum >= 1
    c = plan(RunConfig(strategy="ddp", micro_batch_size=4, global_batch_size=32, **CPU)).config
    assert (c.micro_batch_size, c.grad_accum) == (4, 4)


def _ds(tmp_path, name, cfg):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


def test_a_deepspeed_file_states_intent(tmp_path):
    # what Hugging Face Trainer users write: ZeRO-3 offloading parameters and optimizer, fp16, checkpointing, WarmupDecayLR
    offload_all = _ds(tmp_path, "offload.json", {
        "fp16": {"enabled": True}, "gradient_checkpointing": True,
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
        "optimizer": {"type": "AdamW", "params": {"lr": 5e-5, "weight_decay": "auto"}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 1000, "total_num_steps": 5000,
                                                          "warmup_max_lr": "auto"}},
        "train_micro_batch_size_per_gpu": "auto"})
    r = plan(RunConfig(model="llama-7b", deepspeed_config=offload_all, **GPU_80))
    c = r.config
    assert (c.strategy, c.precision, c.activation_checkpointing) == ("zero3_offload_all", "16-mixed", True)
    assert (c.lr, c.lr_schedule, c.warmup_steps, c.max_steps, c.min_lr_ratio) == (5e-5, "linear", 1000, 5000, 0.0)
    assert any("offload.json decided" in d for d in r.decisions) and r.deepspeed_config["zero_optimization"]["stage"] == 3
    assert "the file decided" in r.auto["reasons"][0]  # under --strategy auto (plan's default) the file picks the preset
    stage2 = _ds(tmp_path, "z2.json", {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    assert plan(RunConfig(model="llama-1b", deepspeed_config=stage2, **GPU_80)).config.strategy == "zero2_offload"
    # its own lr and bf16, no flags: no contradiction with the flags' defaults
    bf16 = _ds(tmp_path, "bf16.json", {"bf16": {"enabled": True}, "zero_optimization": {"stage": 3},
                                       "optimizer": {"type": "AdamW", "params": {"lr": 5e-5}}})
    c = plan(RunConfig(strategy="zero3", model="llama-1b", deepspeed_config=bf16, **GPU_80)).config
    assert (c.strategy, c.precision, c.lr) == ("zero3", "bf16-mixed", 5e-5)
    with pytest.raises(UserError, match=r"lr is 5e-05 in .*bf16.json but --lr gives 0.001"):  # only a typed flag contradicts
        plan(RunConfig(strategy="zero3", model="llama-1b", deepspeed_config=bf16, lr=1e-3, **GPU_80))


def test_launch_print_of_a_70b_plans_from_the_config_alone(in_process, cache_dir, tmp_path):
    (tmp_path / "70b").mkdir()
    (tmp_path / "70b" / "config.json").write_text(
        json.dumps({**json.loads(open(os.path.join(os.path.dirname(__file__), "../../recipes/configs/models/llama-3.1-70b.json")).read())}))
    before = sorted(p.name for p in cache_dir.rglob("*"))
    for model in ("llama-2-70b", tmp_path / "70b"):
        t0 = time.perf_counter()
        rc, out, err = in_process("launch", "--print", "--model", model, "--num-nodes", "4", "--devices", "8",
                                  "--master-addr", "node0", "--master-port", "29500", "--accelerator", "gpu",
                                  "--gpu-memory-gib", "80", "--cpu-memory-gib", "1024", "--strategy", "zero3",
                                  "--activation-checkpointing")  # in this process: no interpreter start-up in the 30 s
        assert rc == 0, err[-2000:]
        assert "node 3: torchrun" in out and time.perf_counter() - t0 < 30
    assert sorted(p.name for p in cache_dir.rglob("*")) == before  # no weights built


def test_export_config_writes_the_schedule(in_process, tmp_path):
    out = tmp_path / "ds.json"
    rc, _, err = in_process("export-config", "--format", "deepspeed", "--strategy", "zero3", "--lr-schedule", "cosine",
                            "--warmup-steps", "10", "--output", out)
    assert rc == 0, err[-2000:]
    sched = json.loads(out.read_text())["scheduler"]
    assert sched["type"] == "WarmupCosineLR" and sched["params"]["warmup_num_steps"] == 10


def test_the_offload_batch_follows_the_micro_batch_auto_took():
    c = plan(RunConfig(strategy="auto", model="llama-7b", offload="optimizer", activation_checkpointing=True, **GPU_80)).config
    tokens = c.micro_batch_size * c.seq_len
    assert c.strategy == "zero3_offload" and c.micro_batch_size > 1  # sized after micro-batch auto, not at micro-batch 1
    assert c.grad_accum == min(16, -(-131_072 // tokens))


def test_accumulation_reaches_the_estimate_and_the_micro_batch_auto_takes():
    """--grad-accum above 1 keeps fsdp's gradients live through forward (core/memory.py): the estimate of the run that
    trains counts them, and so does micro-batch auto's search, also where --global-batch-size implies the
    accumulation."""
    fsdp = dict(strategy="fsdp", model="llama-1b", kernels="torch", compile=False)
    one, four = (plan(RunConfig(**fsdp, micro_batch_size=16, grad_accum=n, **GPU_80)) for n in (1, 4))
    grads = four.estimate["parts"]["gradients"]
    assert four.estimate["gpu_bytes"] - one.estimate["gpu_bytes"] == grads > 0
    # a GPU on which micro-batch 16 fits only without the gradients (fits: within 90%)
    gib = (one.estimate["gpu_bytes"] + grads / 2) / 0.9 / 2**30
    gpu = dict(accelerator="gpu", gpus=1, gpu_memory_gib=gib, cpu_memory_gib=512)
    assert plan(RunConfig(**fsdp, micro_batch_size="auto", global_batch_size=16, **gpu)).config.micro_batch_size == 16
    c = plan(RunConfig(**fsdp, micro_batch_size="auto", global_batch_size=64, **gpu)).config
    assert c.micro_batch_size < 16 and c.micro_batch_size * c.grad_accum == 64


def test_gpu_runs_take_expandable_segments_unless_told_otherwise(monkeypatch):
    """The GPU default (one H100: fsdp's peak 2.1 MB lower on llama-1b, 1.3 MB under the Trainer's FSDP2 + Liger;
    results/2026-12-07c-peak-sites.md): on unless the flag or the allocator's environment variable says otherwise; off
    on CPU, where asking for it is an error."""
    from shardlab.recipes.resolve import ALLOC_ENV, allocator_env, resolve_run

    for name in ALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    gpu = dict(strategy="fsdp", model="llama-1b", **GPU_80)
    assert resolve_run(RunConfig(**gpu), for_run=False).config.expandable_segments is True
    assert resolve_run(RunConfig(**gpu, expandable_segments=False), for_run=False).config.expandable_segments is False
    for value, expected in (("max_split_size_mb:128", False), ("expandable_segments:True,max_split_size_mb:64", True)):
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", value)
        run = resolve_run(RunConfig(**gpu), for_run=False)
        assert run.config.expandable_segments is expected
        assert f"as PYTORCH_CUDA_ALLOC_CONF says ({value})" in " ".join(run.decisions)
        assert allocator_env() == ("PYTORCH_CUDA_ALLOC_CONF", expected)  # what a rank leaves to the environment
    assert resolve_run(RunConfig(**gpu, expandable_segments=False), for_run=False).config.expandable_segments is False
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert resolve_run(RunConfig(strategy="fsdp", model="tiny"), for_run=False).config.expandable_segments is False
    with pytest.raises(UserError, match="--expandable-segments: it sets PyTorch's CUDA allocator, for GPU runs only"):
        resolve_run(RunConfig(strategy="fsdp", model="tiny", expandable_segments=True), for_run=False)
