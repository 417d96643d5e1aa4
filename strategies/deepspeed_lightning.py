"""Lightning's DeepSpeedStrategy made to run on CPU processes too, and to scale the loss once.

Its own module so that strategies/deepspeed.py (presets, memory model, config) loads without Lightning:
`recipe plan` and `recipe strategies` never import it; `ZeRO.lightning_strategy` does, when a run starts.
"""
from __future__ import annotations

import argparse
import importlib
from contextlib import contextmanager

from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy

from shardlab.strategies.deepspeed import settle_overlap
from shardlab.strategies.deepspeed_experiments import INSTALLED


class _LightningDeepSpeed(DeepSpeedStrategy):
    """Lightning's DeepSpeedStrategy, also on CPU processes over gloo.

    Stock Lightning refuses CPU in `setup_environment`, validates CUDA device indices in
    `setup_distributed`, and passes `device_rank=root_device.index` (None on CPU) to DeepSpeed,
    which then fails comparing None with an int. setup_environment, setup_distributed and
    _setup_model_and_optimizer fix that; `backward` fixes a numerics bug on every device (see there).
    experiments: the run's levers; zero3's `fused-step` replaces three parts of the ZeRO-3 step
    (deepspeed_zero3_step.py), `no-fetch-sync` its one-rank fetch (deepspeed_fetch.py), zero3_offload's `gpu-cast` the
    copy of CPU-stepped weights (deepspeed_offload_cast.py); the rest: deepspeed_experiments.INSTALLED.
    """

    def __init__(self, *args, experiments: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.experiments = experiments

    def backward(self, closure_loss, optimizer, *args, **kwargs):  # type: ignore[override]
        # Lightning already divides the loss by accumulate_grad_batches; DeepSpeed's engine.backward
        # would divide it by gradient_accumulation_steps again. Harmless for Adam without clipping,
        # but with clipping the curves leave DDP/FSDP's from the first clipped step. Scale once.
        return super().backward(closure_loss, optimizer, *args, scale_wrt_gas=False, **kwargs)

    @contextmanager
    def model_sharded_context(self):
        # torch caches, at the first `with torch.device(...)` of the process, which factory functions such a context
        # redirects (torch.utils._device._device_constructors). Under ZeRO-3, deepspeed.zero.Init replaces
        # torch.tensor, torch.empty and the like while the model is built; a first `with torch.device("meta")` there
        # (torchao's Float8Linear.from_float, --float8) cached DeepSpeed's replacements, so once they were put back no
        # device context redirected torch's own functions again in this process: transformers' from_pretrained (the
        # export check's reload) then saw no meta context, ran its init on meta parameters, and left the RoPE
        # frequencies uninitialised (garbage, once NaN, logits). Filling the cache first keeps torch's functions in it.
        from torch.utils._device import _device_constructors

        _device_constructors()
        with super().model_sharded_context():
            yield

    # overlap-step (deepspeed_offload_overlap.py) leaves the optimizer's CPU step running on a thread after the step:
    # DeepSpeed's checkpoint reads the weights and the optimizer's state, and the end of training ends the process
    def save_checkpoint(self, *args, **kwargs):  # type: ignore[override]
        settle_overlap()
        return super().save_checkpoint(*args, **kwargs)

    def load_checkpoint(self, *args, **kwargs):  # type: ignore[override]
        settle_overlap()
        return super().load_checkpoint(*args, **kwargs)

    def teardown(self) -> None:
        settle_overlap()
        super().teardown()

    def setup_environment(self) -> None:
        DDPStrategy.setup_environment(self)  # skips DeepSpeedStrategy's CUDA-only check

    def setup_distributed(self) -> None:
        reset_seed()  # as DeepSpeedStrategy does, minus the CUDA device-index validation
        self.set_world_ranks()
        from shardlab.strategies.deepspeed_console import without_shm_op

        with without_shm_op():  # CPU ranks: not the inference-only op's minute-long first build
            self._init_deepspeed_distributed()

    def _setup_model_and_optimizer(self, model, optimizer, lr_scheduler=None):  # type: ignore[override]
        import deepspeed

        device_rank = self.root_device.index if self.root_device.index is not None else self.local_rank
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            args=argparse.Namespace(device_rank=device_rank),
            config=self.config,
            model=model,
            model_parameters=filter(lambda p: p.requires_grad, model.parameters()),
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
            dist_init_required=False,
        )
        share_backup_optimizer(ds_optimizer)
        targets = {"model": (engine.module,), "optimizer": (ds_optimizer,), "process": ()}
        for name, (module, target) in INSTALLED.items():  # in this order: late-wait after fused-step
            if name in self.experiments:
                importlib.import_module(f"shardlab.strategies.{module}").install(*targets[target])
        return engine, ds_optimizer


def share_backup_optimizer(zero) -> None:
    """Partial offload (offload_optimizer.ratio < 1): DeepSpeed's ZeRO-3 steps the sub-groups it keeps on the GPU with
    a torch AdamW of its own ("backup_optimizer", deepspeed/runtime/zero/stage3.py) whose first param group is a new
    dict holding the lr of the moment it was built (LambdaLR had already set warm-up's first value), and whose state
    is its own dict. The schedule steps DeepSpeedCPUAdam's groups only, so the GPU's share would keep that first lr,
    and the per-parameter API (safe_get_full_optimizer_state: portable checkpoints) reads DeepSpeedCPUAdam's state
    only. Both optimizers then share one first group (AdamW's own keys added, as DeepSpeed does for the other groups)
    and one state dict: each sub-group's flat fp32 tensor is stepped by exactly one of them, so their entries never
    mix. A no-op without the backup (ratio 1) and on CPU processes, where DeepSpeed puts every sub-group on the CPU."""
    backup = getattr(zero, "backup_optimizer", None)
    if backup is None:
        return
    main = zero.optimizer
    for key, value in backup.param_groups[0].items():
        main.param_groups[0].setdefault(key, value)  # params stays the main group's: DeepSpeed fills it per step
    backup.param_groups[0] = main.param_groups[0]
    backup.state = main.state
