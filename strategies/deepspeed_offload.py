"""DeepSpeed ZeRO-3's sub-groups as it cuts a rank's partition (`sub_groups`: the largest is what zero3's step holds in
fp32 gradients), and its partial optimizer offload (`--offload-ratio R`): which share of the partition DeepSpeed really
keeps on the CPU; for the memory estimate (strategies/deepspeed_memory.py zero3_states) and the config."""
from __future__ import annotations

from shardlab.core.memory import Shape

# Partial optimizer offload (`--offload-ratio R`, DeepSpeed's offload_optimizer.ratio; ZeRO-Offload++). DeepSpeed
# (runtime/zero/stage3.py) cuts each rank's partition into sub-groups, walking the parameters in order and closing a
# sub-group once it holds >= sub_group_size elements (_create_fp16_sub_groups); the first int((1 - R) x count)
# sub-groups keep their fp32 master, Adam moments and fp32 gradients on the GPU and step with a torch AdamW (its
# "backup_optimizer"), the rest go to the CPU and step with DeepSpeedCPUAdam (_setup_for_real_optimizer,
# _optimizer_step). The split is by count of sub-groups, and a parameter is never cut: at DeepSpeed's default of 1e9
# elements a 1B model is one or two sub-groups and R means nothing. With a ratio the preset sets sub_group_size to
# 1e7: for R = 0.25 .. 0.9 the GPU share (1 - offloaded_share below) is then within 3.1 points of 1 - R for llama-1b
# on 1-8 GPUs, 1 point for Llama-2-7B on 1-8 and 70B on 1-64 (computed, not measured). No size helps against one large
# tensor early in the order: Llama-3.2-1B's tied embedding (21% of it) puts its GPU share up to 17 points over 1 - R;
# the estimate counts the share DeepSpeed will really keep, not 1 - R. 1e7 keeps the step's loop short (70B on one
# GPU: ~480 sub-groups, one optimizer call each); smaller adds calls for little, the floor being the largest
# parameter's partition. A user's --deepspeed-config may set its own sub_group_size (its file wins).
OFFLOAD_RATIO_SUB_GROUP_SIZE = 10**7


def _parameter_sizes(s: Shape) -> list[int]:
    """Element counts of the trainable parameters in the order ZeRO-3 groups them (LlamaForCausalLM's
    named_parameters: embeddings, then per decoder layer q, k, v, o, gate, up, down and two norms, the final norm,
    an untied lm_head; biases left out: a few thousand elements beside millions)."""
    hd = s.head_dim or s.hidden // s.heads
    q, kv, h, i = s.heads * hd, s.kv_heads * hd, s.hidden, s.intermediate
    layer = [h * q, h * kv, h * kv, q * h, h * i, h * i, i * h, h, h]
    return [s.vocab * h] + layer * s.layers + [h] + ([] if s.tied else [s.vocab * h])


def offloaded_share(s: Shape, gpus: int, ratio: float, sub_group_size: int = OFFLOAD_RATIO_SUB_GROUP_SIZE) -> float:
    """The share of a rank's optimizer partition that DeepSpeed puts on the CPU for `ratio`: whole sub-groups, as
    stage3.py cuts and assigns them (see OFFLOAD_RATIO_SUB_GROUP_SIZE); exactly 1.0 for ratio 1."""
    if ratio >= 1:
        return 1.0
    groups = sub_groups(s, gpus, sub_group_size)
    on_gpu = sum(groups[:int((1 - ratio) * len(groups))])
    return 1 - on_gpu / sum(groups)


def sub_groups(s: Shape, gpus: int, sub_group_size: int) -> list[int]:
    """The element counts of a rank's sub-groups, as stage3.py's _create_fp16_sub_groups cuts its partition (one
    parameter group: shardlab's optimizer has one)."""
    parts = [-(-n // gpus) for n in _parameter_sizes(s)]  # each parameter's partition (ceil: DeepSpeed pads)
    groups, acc = [], 0
    for k, n in enumerate(parts):
        acc += n
        if acc >= sub_group_size or k == len(parts) - 1:
            groups.append(acc)
            acc = 0
    return groups
