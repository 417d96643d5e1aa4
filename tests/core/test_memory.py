"""The memory estimate: DeepSpeed's own conventions for ZeRO model states, meta-device parameter counts."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

from shardlab.core import memory, registry
from shardlab.core.config import RunConfig
from shardlab.recipes.model import model_config


def _work(gpus=8, nodes=1, mb=1, seq=2048, ac=False, precision="bf16-mixed"):
    return memory.Workload(micro_batch_size=mb, seq_len=seq, activation_checkpointing=ac, precision=precision,
                           gpus_per_node=gpus, num_nodes=nodes)


def test_llama_1b_parameter_count_from_meta_device():
    s = memory.shape_of(model_config("llama-1b"))
    assert s.params == 1_100_048_384 and s.largest_layer_params == 32000 * 2048


def test_tied_embeddings_are_counted_once():
    tied = model_config("llama-3.2-1b")
    untied = model_config("llama-3.2-1b")
    untied.tie_word_embeddings = False
    a, b = memory.shape_of(tied), memory.shape_of(untied)
    assert a.tied and not b.tied and a.params == 1_235_814_400
    assert b.params - a.params == a.vocab * a.hidden  # lm_head's own matrix
    assert not memory.shape_of(model_config("llama-1b")).tied


def test_70b_shape_is_counted_without_allocating():
    t0 = time.perf_counter()
    s = memory.shape_of(model_config("llama-70b"))
    assert 68e9 < s.params < 70e9 and time.perf_counter() - t0 < 30


@pytest.mark.parametrize("model", ["llama-7b", "llama-70b"])
@pytest.mark.parametrize("gpus,nodes", [(1, 1), (8, 1), (8, 4)])
def test_offloaded_cpu_side_is_below_deepspeeds_buffer_factor(model, gpus, nodes):
    """DeepSpeed's estimator adds x1.5 for pinned buffers; measured on one H200, the rank holds 18.5 bytes per
    parameter plus a fixed part (results/2026-12-03-memory-h200.md): below DeepSpeed's figure, above 16 bytes."""
    s = memory.shape_of(model_config(model))
    fetched = max(s.largest_layer_params, s.decoder_layer_params)
    for preset, params in (("zero3_offload", False), ("zero3_offload_all", True)):
        ours = registry.get(preset).build().model_state_bytes(s, _work(gpus, nodes))
        cpu, _, _ = estimate_zero3_model_states_mem_needs(s.params, fetched, gpus, nodes, cpu_offload=True,
                                                          cpu_offload_params=params, zero_init=True)
        assert cpu / 1.5 < ours.cpu < cpu + 8 * 7e9, preset
    ours = registry.get("zero2_offload").build().model_state_bytes(s, _work(gpus, nodes))
    cpu, _ = estimate_zero2_model_states_mem_needs(s.params, gpus, nodes, cpu_offload=True)
    assert cpu / 1.5 < ours.cpu < cpu + 8 * 13e9


def test_llama2_7b_zero3_offload_fits_the_h200_host_it_ran_on():
    """Issue 18: `recipe plan` said 150.6 GiB CPU for zero3_offload on the 7B shape, and it ran on a 126 GiB host."""
    s = memory.shape_of(model_config("llama-2-7b"))
    e = registry.get("zero3_offload").build().estimate(s, _work(1, ac=True, mb=2))
    assert e.cpu_bytes < 126 * 2**30 and e.gpu_bytes < 0.9 * 139 * 2**30


def test_offloading_more_never_needs_more_gpu_memory():
    """zero3_offload_all <= zero3_offload <= zero3, fsdp_offload <= fsdp, zero2_offload <= zero2 per GPU, for every shape and world size (issue 18's 13B case)."""
    for model in ("llama-7b", "llama-13b", "llama-70b"):
        s = memory.shape_of(model_config(model))
        for gpus, nodes in ((1, 1), (8, 1), (8, 2), (8, 4)):
            w = _work(gpus, nodes)
            gb = [registry.get(p).build().estimate(s, w).gpu_bytes for p in ("zero3_offload_all", "zero3_offload", "zero3")]
            assert gb == sorted(gb), (model, gpus, nodes, gb)
            fsdp = [registry.get(p).build().estimate(s, w).gpu_bytes for p in ("fsdp_offload", "fsdp")]
            assert fsdp == sorted(fsdp)
            z2 = [registry.get(p).build().estimate(s, w).gpu_bytes for p in ("zero2_offload", "zero2")]
            assert z2 == sorted(z2)


def test_sharding_divides_by_world_size():
    s = memory.shape_of(model_config("llama-7b"))
    fsdp = registry.get("fsdp").build()
    one, eight = fsdp.model_state_bytes(s, _work(1)), fsdp.model_state_bytes(s, _work(8))
    assert eight.gpu < one.gpu / 4
    ddp = registry.get("ddp").build()
    assert ddp.model_state_bytes(s, _work(1)).gpu == ddp.model_state_bytes(s, _work(8)).gpu


def test_activation_checkpointing_and_micro_batch_move_activations():
    s = memory.shape_of(model_config("llama-1b"))
    full, ckpt = memory.activation_bytes(s, _work(mb=8)), memory.activation_bytes(s, _work(mb=8, ac=True))
    assert ckpt < full / 5
    assert memory.activation_bytes(s, _work(mb=4)) * 2 == pytest.approx(full, rel=1e-6)


def test_compiled_layers_under_liger_count_compiled_activations_and_ligers_loss():
    """--compile --kernels liger: compiled layers with torch's kernels, Liger's loss only (recipes/kernels.py)."""
    import dataclasses

    s = memory.shape_of(model_config("llama-1b"))
    liger = dataclasses.replace(_work(mb=8), kernels="liger", chunked_loss=True)
    both, torch_compiled = (dataclasses.replace(liger, compiled=True),
                            dataclasses.replace(_work(mb=8), kernels="torch", compiled=True))
    assert memory.layer_activation_bytes(s, both) == memory.layer_activation_bytes(s, torch_compiled)
    assert memory.layer_activation_bytes(s, both) != memory.layer_activation_bytes(s, liger)
    assert memory.logits_bytes(s, both) == memory.logits_bytes(s, liger) < memory.logits_bytes(s, torch_compiled) / 10


def test_accumulation_keeps_the_gradients_ddp_and_fsdp_free_after_each_step():
    """Above --grad-accum 1 the step's earlier micro-batches' gradients are live through the next forward. fsdp at
    micro-batch 16 x 4 on one H100 measured 57.41 GiB, its fp32 gradients (4.1 GiB) over the estimate that left them
    out (results/2026-12-06d-liger-compile.md); its point in MEASURED is checked below. DeepSpeed's gradient buffers
    are counted as always live already."""
    import dataclasses

    s = memory.shape_of(model_config("llama-1b"))
    work = dataclasses.replace(_work(gpus=1, mb=16), kernels="liger", chunked_loss=True)
    for name in ("ddp", "fsdp", "zero2", "zero3"):
        strategy = registry.get(name).build()
        one, four = (strategy.estimate(s, dataclasses.replace(work, grad_accum=n)).gpu_bytes for n in (1, 4))
        assert four - one == strategy.model_state_bytes(s, work).gradients, name
        assert (four > one) == (name in ("ddp", "fsdp")), name


MEASURED = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-12-03-memory-h200.json"
# The fields of a run's config that change its memory; a default among them changing needs new measurements.
MEMORY_FIELDS = ("kernels", "compile", "precision", "chunked_loss", "grad_reduce_dtype")


def _measured_rows() -> list[dict]:
    """Every point, less those a later fix made obsolete (each says why in `superseded`; kept as the record)."""
    return [r for r in json.loads(MEASURED.read_text())["rows"] if "measured_bytes" in r and "superseded" not in r]


def _workload(c: dict) -> memory.Workload:
    return memory.Workload(micro_batch_size=c["micro_batch_size"], seq_len=c["seq_len"],
                           activation_checkpointing=c["activation_checkpointing"], precision=c["precision"],
                           gpus_per_node=c["devices"], num_nodes=c["num_nodes"],
                           chunked_loss=c["chunked_loss"] or c["kernels"] == "liger", kernels=c["kernels"],
                           compiled=bool(c["compile"]), float8=bool(c.get("float8")),
                           offload_ratio=c.get("offload_ratio") or 1.0,  # levers: absent from older rows
                           grad_accum=c.get("grad_accum") or 1,
                           experiments=tuple(c.get("experiments") or ()))  # older rows: stock


def _tag(r: dict) -> str:
    c = r["config"]
    lever = "-float8" if c.get("float8") else f"-ratio{c['offload_ratio']:g}" if c.get("offload_ratio") else \
        "-compile" if c["kernels"] == "liger" and c.get("compile") else ""  # Liger's loss, compiled layers
    lever += f"-ga{c['grad_accum']}" if (c.get("grad_accum") or 1) > 1 else ""
    levers = "".join(f".{e}" for e in c.get("experiments") or [])  # zero3's defaults since 2026-12-05
    return (f"{c['model']}-{c['strategy']}-{c['kernels']}-{'ac' if c['activation_checkpointing'] else 'noac'}"
            f"-mb{c['micro_batch_size']}{lever}" + (f"-exp{levers}" if levers else ""))


# Points measured outside 10%, each with what is known; strict: once the estimate holds there, remove the entry.
_FLOAT8 = ("float8 + compile keeps less than compile in 16-bit (the estimate counts 16-bit activations for it): "
           "+18% / +15% over on the two points measured since the compile fix (results/2026-12-05d-h200.md); "
           "too few to model, and on the safe side")
_LEAN_OFFLOAD = ("zero3_offload under lean-config (not its default) with checkpointing: 4.94 GiB against 5.88 (+19%); "
                 "lean-config frees DeepSpeed's contiguous gradient buffer, which the offload estimate counts on the "
                 "GPU (results/2026-12-06e-idle.md); without checkpointing +4.1%. One point, on the safe side")
KNOWN_OUTSIDE: dict[str, str] = {
    "llama-1b-fsdp-torch-noac-mb8-float8": _FLOAT8,
    "llama-3.2-3b-fsdp-torch-noac-mb8-float8": _FLOAT8,
    "llama-1b-zero3_offload-liger-ac-mb8-exp.lean-config": _LEAN_OFFLOAD,
}


@pytest.mark.parametrize("row", [pytest.param(r, marks=pytest.mark.xfail(reason=KNOWN_OUTSIDE[_tag(r)], strict=True))
                                 if _tag(r) in KNOWN_OUTSIDE else r for r in _measured_rows()], ids=_tag)
def test_estimate_within_10_percent_of_h200_measurement(row):
    """torch.cuda.max_memory_allocated of a real run on one H200 (benchmarks/gpu_memory.py) against the estimate
    for that run's own resolved config, whatever today's defaults are."""
    c = row["config"]
    e = registry.get(c["strategy"]).build().estimate(memory.shape_of(model_config(c["model"])), _workload(c))
    assert e.gpu_bytes == pytest.approx(row["measured_bytes"], rel=0.10), (
        f"{_tag(row)}: estimate {e.gpu_bytes / 2**30:.2f} GiB, measured {row['measured_bytes'] / 2**30:.2f} GiB")


# CPU points outside 15%, on the safe side (the estimate above), with what is known; strict: remove once inside.
_SMALL_RATIO_CPU = ("+19%: the CPU side falls by less than the 16 bytes a parameter the estimate moves to the GPU at "
                    "small ratios (measured 26.83 / 16.65 / 12.07 / 9.67 GB at R = 1 / 0.5 / 0.25 / 0.1, "
                    "results/2026-12-06d-liger-compile.md; 9.66 GB under gpu-grads, results/2026-12-06f-offload.md)")
KNOWN_CPU_OVER = {"llama-1b-zero3_offload-liger-noac-mb16-ratio0.1-ga4": _SMALL_RATIO_CPU,
                  "llama-1b-zero3_offload-liger-noac-mb16-ratio0.1-ga4-exp.gpu-grads": _SMALL_RATIO_CPU}


def test_offload_cpu_estimate_follows_the_measured_process():
    """The CPU column of the offloading presets against the rank's peak resident set on the GPU machine."""
    for row in _measured_rows():
        c = row["config"]
        if "offload" not in c["strategy"] or not row.get("peak_cpu_bytes"):
            continue
        e = registry.get(c["strategy"]).build().estimate(memory.shape_of(model_config(c["model"])), _workload(c))
        if _tag(row) in KNOWN_CPU_OVER:
            assert row["peak_cpu_bytes"] < e.cpu_bytes and e.cpu_bytes != pytest.approx(row["peak_cpu_bytes"], rel=0.15)
            continue
        assert e.cpu_bytes == pytest.approx(row["peak_cpu_bytes"], rel=0.15), _tag(row)


# fields whose rows before them ran without what they turn on
BEFORE = {"fused_adds": False, "expandable_segments": False}


def test_the_current_gpu_defaults_were_measured():
    """Every built-in preset has measured points under the memory-relevant defaults a GPU run resolves to today:
    change a default (kernels, compile, precision, ...) and this fails until benchmarks/gpu_memory.py re-measures."""
    from shardlab.core import precision as precisions
    from shardlab.recipes import kernels
    from shardlab.recipes.resolve import _compiled, _fused_adds

    rows = _measured_rows()
    for name, preset in registry.presets().items():
        if preset.source != "built-in":
            continue
        k = kernels.default("gpu", installed=True)
        work = memory.Workload(micro_batch_size=1, seq_len=2048, activation_checkpointing=False, precision="bf16-mixed",
                               gpus_per_node=1, num_nodes=1, kernels=k, compiled=None)
        compiled = _compiled(preset, work, "gpu")
        defaults = {"kernels": k, "compile": compiled, "fused_adds": _fused_adds(RunConfig(), preset, compiled, "gpu", {}, k),
                    "precision": precisions.resolve("auto", "gpu", True),
                    "chunked_loss": RunConfig.model_fields["chunked_loss"].default,
                    "grad_reduce_dtype": RunConfig.model_fields["grad_reduce_dtype"].default,
                    "float8": RunConfig.model_fields["float8"].default,
                    "offload_ratio": RunConfig.model_fields["offload_ratio"].default,
                    "expandable_segments": True}  # recipes/resolve.py: on for GPU runs
        levers = list(preset.capabilities.default_experiments)  # zero3's lean-config: 0.4 GB less
        hits = [r for r in rows if r["config"]["strategy"] == name  # levers absent from older rows: their defaults
                and all(r["config"].get(f, BEFORE.get(f, RunConfig.model_fields[f].default)) == v
                        for f, v in defaults.items())
                and (r["config"].get("experiments") or []) == levers]
        assert hits, (f"{name}: no GPU point (H200, or H100 where a row says so) measured under today's GPU defaults "
                      f"{defaults}, experiments {levers}; run benchmarks/gpu_memory.py and add its rows to {MEASURED.name}")
        assert {r["config"]["activation_checkpointing"] for r in hits} == {True, False} or "offload" in name, name


def test_offload_ratio_moves_the_optimizer_share_to_the_gpu():
    """zero3_offload --offload-ratio R: as R falls the GPU holds more (16 bytes a parameter of its share: fp32 master,
    Adam moments, fp32 gradients) and the CPU less; R = 1 is today's estimate, to the byte. R = 0.5 and 0.25 are measured
    points (llama-1b, one H200) checked with the others above."""
    preset = registry.get("zero3_offload").build()
    for model in ("llama-1b", "llama-2-7b"):
        s = memory.shape_of(model_config(model))
        for gpus in (1, 8):
            base = _work(gpus, ac=True)
            today = preset.estimate(s, base)
            rows = [preset.estimate(s, memory.Workload(**{**base.__dict__, "offload_ratio": r}))
                    for r in (1.0, 0.9, 0.75, 0.5, 0.25, 0.1)]
            assert (rows[0].gpu_bytes, rows[0].cpu_bytes) == (today.gpu_bytes, today.cpu_bytes)
            gpu, cpu = [e.gpu_bytes for e in rows], [e.cpu_bytes for e in rows]
            assert gpu == sorted(gpu) and len(set(gpu)) == len(gpu), (model, gpus, gpu)
            assert cpu == sorted(cpu, reverse=True), (model, gpus, cpu)
            # what each of the node's ranks gains on the GPU, the node's CPU side loses
            assert all(gpus * (g - gpu[0]) == pytest.approx(cpu[0] - c, rel=1e-6) for g, c in zip(gpu, cpu))


@pytest.mark.parametrize("model,gpus,within", [("llama-1b", 1, 0.031), ("llama-1b", 2, 0.031), ("llama-1b", 8, 0.031),
                                               ("llama-2-7b", 1, 0.01), ("llama-2-7b", 8, 0.01),
                                               ("llama-2-70b", 8, 0.01), ("llama-2-70b", 64, 0.01)])
def test_the_ratio_is_honoured_by_deepspeeds_sub_groups(model, gpus, within):
    """With the preset's sub_group_size (1e7), DeepSpeed's whole sub-groups keep 1 - R of the partition on the GPU
    to within the points its comment states (strategies/deepspeed.py); the default 1e9 would not."""
    from shardlab.strategies.deepspeed_offload import offloaded_share

    s = memory.shape_of(model_config(model))
    for r in (0.25, 0.5, 0.75, 0.9):
        assert abs(offloaded_share(s, gpus, r) - r) <= within, (r, offloaded_share(s, gpus, r))
    assert offloaded_share(s, gpus, 1.0) == 1.0
    if s.params < 8 * 10**9:  # DeepSpeed's default: one sub-group per rank on 8 GPUs, none of it kept on the GPU
        assert offloaded_share(s, 8, 0.5, sub_group_size=10**9) == 1.0
