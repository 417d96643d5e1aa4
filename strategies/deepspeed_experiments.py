"""zero3's levers (`--experiments`, Capabilities.experiments): what each is, the config it sets, and when it is on.

From a reading of DeepSpeed 0.19.8's ZeRO-3 step for where a one-GPU step spends ~18 ms more than FSDP2's (llama-1b,
61,241 against 65,579 tokens/s, results/2026-12-04b-peers-h200.md). Both train the model zero3 trains: lean-config
changes no arithmetic (CPU: losses identical at every step), fused-step the rounding of the clip norm (fp32, not fp64)
and of the clip (a division in the AdamW kernel, not a multiplication by the reciprocal): CPU, tiny Llama 3 shape, 6
steps clipped every step, at most 1.7e-7 relative in fp32 and 1.8e-5 in bf16-mixed (tests/strategies/
test_zero3_experiments.py). Measured on one H200 (results/2026-12-05-zero3-experiments-h200.md, one call, same order
of magnitude of bf16 loss differences as zero3 against fsdp): llama-1b micro-batch 8, stock 57,841 tokens/s, fused-step
57,381, lean-config 64,668, both 67,677 (0.989x fsdp's 68,438); the 3B shape micro-batch 4, stock 20,505, both 21,355
(0.970x fsdp's 22,026; 1.000x in a second call); with checkpointing the peak (in the step) 2.4 GiB lower on llama-1b,
6.4 on the 3B shape: no 16-bit concatenated gradient copy, no contiguous bucket (zero3_states counts it). So both are
zero3's defaults, and late-wait with them: against itself within one run on one H100 1.015x on llama-1b (95%:
1.012-1.022, results/2026-12-05i-late-wait.md) and 1.018x on the 3B shape (1.012-1.024), the peak unchanged to the
byte (results/2026-12-06b-h100.md); and sub-groups (DeepSpeed's sub_group_size 2e8, not Lightning's 1e12): on one H100
the 3B shape's peak with checkpointing 50.99 GiB, not 59.91, no allocator flush without checkpointing (1.043x there,
1.025x on llama-1b), and zero3 0.993x / 0.994x fsdp in both orders (results/2026-12-06c-sub-groups.md); and
direct-grads: on one H100 +3.5% / +5.6% on llama-1b and +7.1% / +7.7% on the 3B shape over zero3's other defaults,
zero3 0.988-0.999x fsdp on llama-1b and 0.996x / 0.999x on the 3B shape with it (0.954x / 0.929x without), every peak
3-8 KB over the defaults' (the kernel's argument tables; results/2026-12-07b-direct-grads-h100.md). The others are
offered. `--experiments none` runs DeepSpeed's stock ZeRO-3 (e.g. `recipe compare --strategies zero3:experiment=none,zero3`).
"""
from __future__ import annotations

from typing import Any

ZERO3 = {
    "lean-config": "DeepSpeed's throughput timer (a CUDA sync twice a step), contiguous gradient buckets and its "
                   "Python linear wrapper turned off",
    "fused-step": "the clip norm in one fp32 foreach kernel (not per tensor in fp64), the fp32 gradient cast from its "
                  "flat buffer (no concatenated copy) and the clip folded into a fused AdamW",
    "no-fetch-sync": "on a one-rank group, each module's fetch without DeepSpeed's host wait for the GPU (the partition "
                     "is already the parameter, on this device)",
    "param-lists": "each module's parameter list built once (DeepSpeed walks the module's submodules for it at every "
                   "fetch and release, and the whole model twice a step)",
    "no-nvtx": "DeepSpeed's NVTX ranges (for Nsight Systems; a push and a pop through Python around each of ~1,200 "
               "ZeRO-3 calls a step) off",
    "late-wait": "the step's host waits for the GPU moved after its kernels are queued: the end of backward waits for "
                 "DeepSpeed's gradient stream on the device, and the clip norm's inf/NaN check is read after the update "
                 "(the fused AdamW skips it on the device where the check fails); needs fused-step",
    "sub-groups": "the optimizer step in sub-groups of 2e8 parameters (DeepSpeed's sub_group_size; Lightning's 1e12 "
                  "makes the partition one): the step's fp32 gradients a sub-group at a time, not the whole "
                  "partition's at once (the 3B shape: at most 1.6 GB, not 12.9)",
    "direct-grads": "the 16-bit gradients to the AdamW as they are: on a one-rank group without DeepSpeed's "
                    "concatenation, division by one and reduce-scatter, and stepped by a kernel that upcasts them as it "
                    "reads them (no fp32 gradient per sub-group); needs fused-step",
}
ZERO3_SUB_GROUP_SIZE = int(2e8)
ZERO3_DEFAULTS = ("lean-config", "fused-step", "late-wait", "sub-groups", "direct-grads")
ZERO3_OFFLOAD = {
    # lean-config under offload (zero3: +12%): on one H100 at the selector's offload batch (16 x 4) it ran 0.972x
    # the Trainer's offload + Liger of the same call, and -1% / +3% against the stock runs of another call at
    # --offload-ratio 0.25 / 0.1 (results/2026-12-06e-idle.md): no measured gain, so not zero3_offload's default
    "lean-config": ZERO3["lean-config"],
    "gpu-cast": "the CPU-stepped fp32 weights page-locked where they are, copied to the GPU without waiting and cast "
                "there (not cast by the CPU into pageable memory and copied while the host waits), in sub-groups of 1e8 "
                "parameters so that one sub-group's copy runs while the CPU steps the next",
    "gpu-grads": "under --offload-ratio below 1, the gradients of the sub-groups stepped on the GPU accumulated there, "
                 "in their fp32 gradient (DeepSpeed moves every sub-group's to pinned CPU memory and back at each "
                 "micro-batch)",
    "overlap-comm": "DeepSpeed's overlap_comm: each gradient bucket's reduction and its copies to and from pinned CPU "
                    "memory run on their own stream, beside backward (zero3_offload's own config, run by "
                    "--experiments none, has it off: they run on the compute stream)",
    "gpu-accum": "the gradients of the sub-groups stepped on the CPU accumulated across micro-batches on the GPU, in "
                 "one buffer of the model's 16-bit dtype (2 bytes a parameter more GPU memory), and copied to the CPU "
                 "once a step at the accumulation boundary (DeepSpeed moves them to pinned CPU memory and back at each "
                 "micro-batch); offered, not a default: +6.5% tokens/s at the selector's offload batch for 2 bytes a "
                 "parameter of the GPU memory offload is chosen to save",
    "overlap-step": "one GPU only, needs gpu-cast: the CPU-stepped sub-groups' clip, AdamW and copy to the GPU run on a "
                    "host thread once the step returns, beside the next forward, whose first read of each parameter "
                    "waits only for its own sub-group (the same arithmetic); offered, not a default: +2.5-3.8% "
                    "tokens/s at the selector's offload batch on one H100, the same peak",
    "copy-stream": "with overlap-step: the copies of the CPU-stepped weights to the GPU on a CUDA stream of their own, "
                   "beside the next forward's kernels (each sub-group's first read waits for its copy on the device); "
                   "offered, not yet measured on a GPU",
}
# overlap-step: on one H100 at the selector's offload batch (llama-1b, 16 x 4, R = 1), alternating with the defaults in
# one call: 55,352 -> 57,460 tokens/s on the means (+3.8%; +2.5% without the call's first run), +2.3% on top of
# gpu-accum in another, every peak the same to the byte, losses within bf16 noise (results/2026-12-08-overlap-step.md).
# Not a default: one GPU only (the defaults do not depend on the world size), and the memory points not re-measured
# overlap-comm: on one H100 at the selector's offload batch (R = 1, on top of gpu-grads), each pair in both orders
# beside the Trainer's offload + Liger (which sets overlap_comm) of the same call: the 3B shape (8 x 8) 14,613 ->
# 17,358 / 17,459 tokens/s (+19%; 0.979x / 0.985x the Trainer's 17,722; +24% in one earlier pair, 2026-12-06g-cast),
# llama-1b (16 x 4) 44,797 -> 49,270 / 48,505 (+8-10%; 1.015x / 0.999x its 48,535), and +5.3% at --offload-ratio 0.1
# with lean-config; every peak the same to the byte, losses within bf16 noise, its memory points measured
# (results/2026-12-06h-overlap.md). So it is a default
# gpu-grads: on one H100 at the selector's offload batch (llama-1b, 16 x 4, --offload-ratio 0.1) 57,783 -> 64,585
# tokens/s (+11.8%), and +12.3% on top of lean-config, the peak unchanged to the byte, losses within bf16 noise
# (results/2026-12-06f-offload.md); it changes nothing at R = 1 on a GPU, where every sub-group steps on the CPU
# gpu-cast: on one H200 (llama-1b, R = 1) micro-batch 8 12,054 -> 21,102 / 20,943 tokens/s (1.75x; 1.87x the Trainer's
# offload + Liger of the same call, 11,294), the selector's batch (32 x 2) 48,647 -> 59,460 (+22%; 1.29x the Trainer's
# 46,073); the peak the same to the byte at 32 x 2, its memory points 0.3-1.4 MB under the earlier defaults', losses
# within bf16 noise (results/2026-12-07d-pinned-cast.md). Measured slower twice before (2026-12-05d, 2026-12-06g): its
# source was pageable then (DeepSpeed's fp32 weights are never pinned); install() now page-locks them in place
# gpu-accum: on one H100 at the selector's offload batch (llama-1b, 16 x 4, R = 1, on top of the defaults), alternating
# default, gpu-accum, gpu-accum, default in one call: 56,464 / 55,254 -> 59,879 / 59,046 tokens/s (+6.5%), the peak
# 46.98 -> 49.18 GB (+2.20 GB, llama-1b's 16-bit gradients, as the estimate counts), losses within bf16 noise, its memory
# points measured (results/2026-12-07g-gpu-accum.md). Not a default: zero3_offload is chosen to save GPU memory, and
# 2 bytes a parameter can push a run off it (Llama-3.1-8B, micro-batch 1, one 40 GiB GPU: 31.1 GiB -> 46.0 GiB, so
# zero2_offload or zero3_offload_all); the selector spends headroom on a smaller --offload-ratio instead (R = 0.1
# ran 70,209 there, 2026-12-07e)
ZERO3_OFFLOAD_DEFAULTS: tuple[str, ...] = ("gpu-grads", "overlap-comm", "gpu-cast")
GPU_CAST_SUB_GROUP_SIZE = int(1e8)  # DeepSpeed's default 1e9 makes llama-1b two sub-groups: little to overlap
# levers on DeepSpeed's private code or flags: its version pinned
PRIVATE = ("fused-step", "gpu-cast", "gpu-grads", "gpu-accum", "no-fetch-sync", "param-lists", "no-nvtx", "late-wait",
           "direct-grads", "overlap-step", "copy-stream")
# what each preset offers (Capabilities.experiments) and runs by default (Capabilities.default_experiments)
OFFERED = {"zero3": (ZERO3, ZERO3_DEFAULTS), "zero3_offload": (ZERO3_OFFLOAD, ZERO3_OFFLOAD_DEFAULTS)}
# those that can be switched off and on between steps of one run (Capabilities.switchable, SHARDLAB_AB)
SWITCHABLE = {"zero3": ("no-fetch-sync", "param-lists", "no-nvtx", "late-wait")}
# a lever that works through another's code, with why: late-wait hands its check to the fused AdamW fused-step asks for
NEEDS = {"late-wait": ("fused-step", "its fused AdamW"),
         "direct-grads": ("fused-step", "its clip as the AdamW's divisor"),
         "overlap-step": ("gpu-cast", "its non-blocking copies are the ones the thread queues"),
         "copy-stream": ("overlap-step", "its thread queues the copies")}
# the levers that are code, not config: the module whose install(...) puts each in place, given the engine's model,
# its ZeRO optimizer or nothing (the process), in the order they are installed
INSTALLED = {"no-fetch-sync": ("deepspeed_fetch", "model"), "param-lists": ("deepspeed_param_lists", "model"),
             "no-nvtx": ("deepspeed_nvtx", "process"), "fused-step": ("deepspeed_zero3_step", "optimizer"),
             "late-wait": ("deepspeed_late_wait", "optimizer"), "gpu-cast": ("deepspeed_offload_cast", "optimizer"),
             "gpu-grads": ("deepspeed_offload_grads", "optimizer"),  # before gpu-accum: it moves what is left
             "gpu-accum": ("deepspeed_offload_accum", "optimizer"),
             "overlap-step": ("deepspeed_offload_overlap", "optimizer"),  # after gpu-cast: it queues gpu-cast's copies
             "copy-stream": ("deepspeed_offload_copy_stream", "optimizer"),  # after overlap-step: its queue's stream
             "direct-grads": ("deepspeed_direct_grads", "optimizer")}

PRIVATE_DEEPSPEED = "0.19.8"  # the PRIVATE levers
# replace private code of this version's ZeRO-3, no-nvtx sets a flag of its nvtx module


def configure(names: tuple[str, ...], zero: dict[str, Any], top: dict[str, Any]) -> None:
    """The config levers' settings (lean-config, overlap-comm, sub-groups, gpu-cast's sub-groups), into the ds_config's
    zero_optimization section and its top level."""
    if "lean-config" in names:
        # the timer syncs the GPU at each forward's start and in engine.step; the contiguous bucket is a copy of each
        # gradient that reduce_scatter never reads; memory_efficient_linear swaps torch's F.linear for a Python
        # autograd.Function in every process (the same GEMMs and saved tensors)
        zero.update(contiguous_gradients=False, memory_efficient_linear=False)
        top["timers"] = {"throughput": {"enabled": False}}
    if "overlap-comm" in names:
        zero["overlap_comm"] = True
    if "sub-groups" in names and "offload_optimizer" not in zero:
        zero["sub_group_size"] = ZERO3_SUB_GROUP_SIZE
    # gpu-cast: smaller sub-groups to overlap, unless --offload-ratio chose its own (the ratio needs whole sub-groups)
    if "gpu-cast" in names and "offload_optimizer" in zero and "ratio" not in zero["offload_optimizer"]:
        zero["sub_group_size"] = GPU_CAST_SUB_GROUP_SIZE


def sub_group_size(names: tuple[str, ...], preset: int) -> int:
    """The sub_group_size a run without optimizer offload steps with: the sub-groups lever's, else the preset's."""
    return ZERO3_SUB_GROUP_SIZE if "sub-groups" in names else preset


def refusal(name: str, precision: str) -> str:
    """Why lever `name` cannot run here ('' where it can): the PRIVATE levers only under the DeepSpeed whose private code
    (or flag) they were written against; fused-step not under fp16 loss scaling, nor a lever that needs it (NEEDS).
    fused-step's loss-scale arithmetic has never run: fp16 is GPU-only, and unmeasured."""
    from importlib.metadata import version

    if name not in PRIVATE:
        return ""
    if version("deepspeed") != PRIVATE_DEEPSPEED:
        return (f"written against DeepSpeed {PRIVATE_DEEPSPEED}, and deepspeed {version('deepspeed')} is installed; "
                f"pip install deepspeed=={PRIVATE_DEEPSPEED} or drop the experiment")
    if name == "overlap-step" and precision == "16-mixed":
        return "not yet run under fp16 loss scaling (16-mixed); use bf16-mixed or drop the experiment"
    if name in NEEDS:  # a lever that works through another cannot run where that one cannot
        return refusal(NEEDS[name][0], precision)
    if name == "fused-step" and precision == "16-mixed":
        return "not yet run under fp16 loss scaling (16-mixed); use bf16-mixed or drop the experiment"
    if name in ("gpu-grads", "gpu-accum") and precision == "16-mixed":  # DeepSpeed's overflow check reads the CPU buffer
        return "DeepSpeed's fp16 overflow check reads the CPU buffer it bypasses (16-mixed); use bf16-mixed or drop it"
    return ""


def check_together(names: tuple[str, ...]) -> None:
    """Refuse a lever that works through another (NEEDS) asked for without it, in the user's terms."""
    from shardlab.core.errors import UserError

    for name, (needed, why) in NEEDS.items():
        if name in names and needed not in names:
            raise UserError(f"--experiments {','.join(names)}: {name} works through {needed} ({why}); add it: "
                            f"--experiments {','.join(names)},{needed}")

