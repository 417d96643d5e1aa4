"""recipes/datamodule.py: the datamodule in a real Lightning Trainer (one CPU process): the state it writes, and a
resume under another micro-batch x grad-accum split of the same global batch."""
import lightning.pytorch as pl
import pytest
import torch

from shardlab.core.errors import UserError
from shardlab.recipes.datamodule import LlamaData


class _Recorder(pl.LightningModule):
    """Records the blocks (each block holds its own index) trained on in every optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.steps: dict[int, list[int]] = {}

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.steps.setdefault(self.trainer.global_step, []).extend(batch[:, 0].tolist())
        return (self.w * batch.float()).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class _SaveAt(pl.Callback):
    def __init__(self, step: int, path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step and not self.path.exists():  # right after the step, as PeriodicCheckpoint
            trainer.save_checkpoint(self.path)


def _trainer(accum: int, max_steps: int, callbacks=()) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, accumulate_grad_batches=accum,
                      use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                      enable_model_summary=False, enable_progress_bar=False, callbacks=list(callbacks))


def _fit(mb: int, accum: int, max_steps: int, save=None, resume=None) -> dict[int, list[int]]:
    module, blocks = _Recorder(), torch.arange(21).view(21, 1)  # 5 global batches of 4 per epoch
    trainer = _trainer(accum, max_steps, [_SaveAt(*save)] if save else [])
    trainer.fit(module, datamodule=LlamaData(blocks, mb, seed=0, grad_accum=accum), ckpt_path=resume)
    assert trainer.global_step == max_steps
    return {step: sorted(seqs) for step, seqs in module.steps.items()}


@pytest.fixture(scope="module")
def uninterrupted() -> dict[int, list[int]]:
    return _fit(2, 2, 12)


# (micro-batch, grad-accum) before and after, and the step of the checkpoint: mid-epoch, at the epoch's end,
# in the second epoch
@pytest.mark.parametrize("before,after,done", [((2, 2), (1, 4), 3), ((1, 4), (4, 1), 5), ((4, 1), (4, 1), 7)])
def test_lightning_resume_under_another_split_trains_the_uninterrupted_steps(uninterrupted, tmp_path, before, after, done):
    full = uninterrupted
    ckpt = tmp_path / "state.ckpt"
    _fit(*before, done, save=(done, ckpt))
    state = torch.load(ckpt, weights_only=False)["LlamaData"]
    assert state == {"optimizer_steps": done, "global_batch": 4, "grad_accum": before[1], "blocks": 21}
    resumed = _fit(*after, 12, resume=str(ckpt))
    assert resumed == {step: full[step] for step in range(done, 12)}


def test_a_resume_that_cannot_continue_the_data_is_refused():
    module = LlamaData(torch.zeros(21, 1, dtype=torch.long), micro_batch_size=2, seed=0, grad_accum=2)
    module.trainer = _trainer(2, 1)
    with pytest.raises(UserError, match="ordered data per rank"):
        module.load_state_dict({"epoch": 0, "batches_done": 6})  # written before global-batch order
    with pytest.raises(UserError, match="global batches of 8 sequences, this run's are 4"):
        module.load_state_dict({"optimizer_steps": 3, "global_batch": 8, "grad_accum": 2, "blocks": 21})
    with pytest.raises(UserError, match="trained on 40 blocks, --data now gives 21"):
        module.load_state_dict({"optimizer_steps": 3, "global_batch": 4, "grad_accum": 2, "blocks": 40})
