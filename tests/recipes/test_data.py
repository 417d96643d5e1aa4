import json

import lightning.pytorch as pl
import pytest
import torch

from shardlab.core.errors import UserError
from shardlab.recipes import data
from shardlab.recipes.model import byte_tokenizer


def test_embedded_corpus_is_real_text():
    text = data.embedded_corpus()
    assert len(text) > 100_000 and "assignment" in text.lower()


def test_folder_of_text_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "world"}) + "\n\n" + json.dumps({"text": "again"}))
    (tmp_path / "ignored.bin").write_bytes(b"\0")
    assert data.read_texts(str(tmp_path)) == ["hello", "world", "again"]


def test_jsonl_without_text_field(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"content": "x"}))
    with pytest.raises(UserError, match="line 1 has no string 'text' field"):
        data.read_texts(str(tmp_path / "x.jsonl"))


def test_blocks_are_eos_joined_and_fixed_length():
    tok = byte_tokenizer()
    blocks = data.token_blocks(["ab", "cd"], tok, seq_len=3)
    assert blocks.shape == (2, 3)
    assert blocks.flatten().tolist() == tok("ab")["input_ids"] + [tok.eos_token_id] + tok("cd")["input_ids"] + [tok.eos_token_id]


# Splits of one global batch of 8 sequences: (world size, micro-batch, grad-accum).
SPLITS = [(4, 2, 1), (2, 2, 2), (1, 2, 4), (2, 4, 1), (1, 8, 1)]
N_BLOCKS = 37  # 4 global batches of 8 per epoch; the last 5 blocks of each epoch's order are left out


def _micro_batches(world: int, mb: int, accum: int, epoch: int, steps_done: int = 0) -> list[list[list[list[int]]]]:
    """[step][rank][micro-batch] -> block indices, one epoch, as each rank's DataLoader would batch them."""
    ranks = []
    for rank in range(world):
        sampler = data.GlobalBatchSampler(N_BLOCKS, mb, accum, world, rank, seed=3, steps_done=steps_done)
        sampler.set_epoch(epoch)
        flat = list(sampler)
        ranks.append([[flat[i:i + mb] for i in range(s, s + mb * accum, mb)] for s in range(0, len(flat), mb * accum)])
    return [list(step) for step in zip(*ranks)]


def _step_sets(world: int, mb: int, accum: int, epochs: int = 2, steps_done: int = 0) -> list[list[int]]:
    """The sorted sequences of every optimizer step, over `epochs` epochs, all ranks together."""
    return [sorted(i for rank in step for micro in rank for i in micro)
            for epoch in range(epochs) for step in _micro_batches(world, mb, accum, epoch, steps_done)]


def test_every_split_of_a_global_batch_trains_each_step_on_the_same_sequences():
    reference = _step_sets(*SPLITS[0])
    assert len(reference) == 8 and all(len(s) == 8 for s in reference)
    for split in SPLITS[1:]:
        assert _step_sets(*split) == reference, split


@pytest.mark.parametrize("split", SPLITS)
def test_each_rank_takes_its_documented_slice_of_the_global_batch(split):
    world, mb, accum = split
    for epoch in range(2):
        order = data.epoch_order(N_BLOCKS, seed=3, epoch=epoch).tolist()
        steps = _micro_batches(world, mb, accum, epoch)
        assert len(steps) == N_BLOCKS // 8  # whole global batches only: the epoch's tail is left out
        for k, step in enumerate(steps):
            global_batch = order[8 * k: 8 * (k + 1)]
            seen = [i for rank in step for micro in rank for i in micro]
            assert sorted(seen) == sorted(global_batch) and len(set(seen)) == 8  # disjoint, and all of it
            for r, rank in enumerate(step):  # rank r: positions [r*P, (r+1)*P); micro-batch j: its j-th mb of them
                for j, micro in enumerate(rank):
                    first = r * mb * accum + j * mb
                    assert micro == global_batch[first:first + mb]


@pytest.mark.parametrize("done", [3, 4, 6])  # mid-epoch, at the epoch's end, in the second epoch
@pytest.mark.parametrize("before,after", [(SPLITS[0], SPLITS[1]), (SPLITS[2], SPLITS[3]), (SPLITS[4], SPLITS[0])])
def test_a_position_in_steps_continues_under_another_split(before, after, done):
    assert _step_sets(*after, steps_done=done) == _step_sets(*before)[done:]


# The datamodule in a real Lightning Trainer (one CPU process): the state it writes, and a resume under
# another micro-batch x grad-accum split of the same global batch.
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
    trainer.fit(module, datamodule=data.LlamaData(blocks, mb, seed=0, grad_accum=accum), ckpt_path=resume)
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
    module = data.LlamaData(torch.zeros(21, 1, dtype=torch.long), micro_batch_size=2, seed=0, grad_accum=2)
    module.trainer = _trainer(2, 1)
    with pytest.raises(UserError, match="ordered data per rank"):
        module.load_state_dict({"epoch": 0, "batches_done": 6})  # written before global-batch order
    with pytest.raises(UserError, match="global batches of 8 sequences, this run's are 4"):
        module.load_state_dict({"optimizer_steps": 3, "global_batch": 8, "grad_accum": 2, "blocks": 21})
    with pytest.raises(UserError, match="trained on 40 blocks, --data now gives 21"):
        module.load_state_dict({"optimizer_steps": 3, "global_batch": 4, "grad_accum": 2, "blocks": 40})
