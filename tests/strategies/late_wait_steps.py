"""`python -m tests.strategies.late_wait_steps PORT`: DeepSpeed 0.19.8's ZeRO-3 optimizer in one real process (gloo
on CPU, NCCL's device on a GPU machine), stepped three times, the second step's gradients NaN, once with fused-step
alone, once with late-wait too and once more in two sub-groups (zero3's sub-groups lever); then each of those three
again with zero3's direct-grads on top ("direct"); prints what each step left (loss, parameters, Adam's state, the
engine's skip count, the norm) as one JSON line, and how many end-of-backward waits late-wait made on the device (GPU
only: CPU processes have no streams) and how many steps and one-rank scatters direct-grads made.
test_zero3_late_wait.py runs it on CPU; the GPU machine's call runs it under CUDA."""
from __future__ import annotations

import json
import os
import sys
import tempfile


def steps(late_wait: bool, device: str, sub_group_size: int = int(1e12), direct: bool = False) -> list[dict]:
    import deepspeed
    import torch

    from shardlab.strategies import deepspeed_direct_grads, deepspeed_late_wait, deepspeed_zero3_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1, fused=True)
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.5, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 3, "sub_group_size": sub_group_size}}
    engine, zero, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, dist_init_required=False)
    deepspeed_zero3_step.install(zero)
    if late_wait:
        deepspeed_late_wait.install(zero)
    if direct:
        deepspeed_direct_grads.install(zero)
    x = torch.randn(4, 16, device=device)
    seen = []
    for batch in (x, torch.full_like(x, float("nan")), x):
        loss = engine(batch.to(torch.bfloat16)).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            params = [p.detach().float().flatten().tolist() for p in model.parameters()]
        states = [zero.optimizer.state[flat] for flat in zero.fp32_partitioned_groups_flat]
        seen.append({"loss": loss.item(), "params": params, "skipped": engine.skipped_steps, "overflow": zero.overflow,
                     "adam_step": float(states[0]["step"]), "exp_avg": [v for s in states for v in s["exp_avg"].tolist()],
                     "norm": float(zero._global_grad_norm), "sub_groups": len(states)})
    return seen


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    trace = os.path.join(tempfile.mkdtemp(), "trace.txt")
    os.environ["SHARDLAB_TRACE"] = trace
    import deepspeed
    import torch

    from shardlab.strategies.deepspeed_console import without_shm_op

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with without_shm_op():
        deepspeed.init_distributed("nccl" if device == "cuda" else "gloo", verbose=False)
    stock, late = steps(False, device), steps(True, device)
    events = open(trace).read().split() if os.path.exists(trace) else []
    open(trace, "w").close()
    split = steps(True, device, sub_group_size=200)  # the 16 x 16 weight, then its bias with the second layer
    in_groups = open(trace).read().split()
    open(trace, "w").close()
    direct = {"late_wait": steps(True, device, direct=True), "sub_groups": steps(True, device, 200, direct=True),
              "fused_step": steps(False, device, direct=True)}
    direct_events = open(trace).read().split()
    print(json.dumps({"device": device, "stock": stock, "late_wait": late, "direct": direct,
                      "direct_steps": direct_events.count("zero3-direct-grads"),
                      "one_rank_scatters": direct_events.count("zero3-one-rank-scatter"),
                      "late_wait_steps": events.count("zero3-late-wait"),
                      "epilogue_device_waits": events.count("zero3-epilogue-device-wait"),
                      "sub_groups": split, "sub_group_spans": in_groups.count("zero3-grad-span")}))


if __name__ == "__main__":
    main()
