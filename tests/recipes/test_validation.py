"""Validation (recipes/validation.py) in this process: the held-out split, the dealing of validation blocks to ranks and
the reduction to the global mean, and a real Lightning run whose training losses validation leaves unchanged.
Every strategy's validation losses against ddp's, and across a resume: test_parity.py and test_reliability.py (the
Llama-3 runs validate after every step); the refusals: test_bad_input.py."""
from __future__ import annotations

import math

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from shardlab.recipes import data, validation


@pytest.mark.parametrize("n,fraction", [(1410, 0.1), (318, 0.1), (7, 0.5), (10, 0.01)])
def test_the_split_is_fixed_by_the_data_and_the_seed(n, fraction):
    train_rows, val_rows = validation.split_rows(n, fraction, seed=42)
    assert len(val_rows) == math.ceil(fraction * n) >= 1
    assert sorted([*train_rows, *val_rows]) == list(range(n))  # disjoint, and all of it
    assert list(train_rows) == sorted(train_rows) and list(val_rows) == sorted(val_rows)  # each in data order
    again = validation.split_rows(n, fraction, seed=42)
    assert np.array_equal(again[0], train_rows) and np.array_equal(again[1], val_rows)
    if n > 10:
        assert not np.array_equal(validation.split_rows(n, fraction, seed=43)[1], val_rows)  # --seed chooses
        assert val_rows[-1] > n // 2  # spread over the data, not its first blocks


def test_training_on_the_rest_is_the_same_global_batches_at_every_split_of_them():
    """The training rows behave as a blocks array of their own: each optimizer step the same sequences, whatever
    the world size x micro-batch x accumulation of the same global batch."""
    blocks = np.arange(40, dtype=np.uint32).reshape(40, 1)
    train_rows, val_rows = validation.split_rows(40, 0.2, seed=1)
    rows = validation.Rows(blocks, train_rows)
    assert len(rows) == 32 and int(rows[0][0]) == train_rows[0] and rows[[1, 2]].tolist() == [[train_rows[1]], [train_rows[2]]]

    def step_sets(world, mb, accum):
        per_rank = [list(data.GlobalBatchSampler(len(rows), mb, accum, world, r, seed=3)) for r in range(world)]
        g = mb * accum
        return [sorted(int(rows[i][0]) for r in per_rank for i in r[k * g:(k + 1) * g]) for k in range(32 // (g * world))]

    reference = step_sets(4, 2, 1)
    assert all(set(s).isdisjoint(val_rows) for s in reference)
    assert step_sets(2, 2, 2) == reference and step_sets(1, 8, 1) == reference


def _set(n: int, with_labels: bool) -> validation.ValidationSet:
    blocks = (np.arange(n * 6, dtype=np.uint32) % 50 + 2).reshape(n, 6)
    if not with_labels:
        return validation.ValidationSet(blocks)
    labels = blocks.astype(np.int32).copy()
    labels[:, :3] = -100  # a prompt, then the answer
    labels[n // 2 + 1:n // 2 + 2] = -100  # an example without targets (none when n is 1)
    return validation.ValidationSet(blocks, labels)


@pytest.mark.parametrize("with_labels", [False, True])
@pytest.mark.parametrize("n", [1, 5, 13])  # fewer blocks than ranks x micro-batch, and more
def test_every_split_deals_every_block_once_and_reduces_to_the_global_mean(n, with_labels):
    """Each rank sums a loss per target and counts its targets; the sums and counts added over ranks give the mean over
    every target of the set at every world size and micro-batch, and every rank runs as many forward passes."""
    val = _set(n, with_labels)
    per_target = lambda ids, labels: float(((labels[:, 1:] != -100) * (ids[:, 1:].double() * 0.37 + 1)).sum())  # noqa: E731
    everything = [(torch.from_numpy(val.blocks.astype(np.int64)),
                   torch.from_numpy((val.labels if with_labels else val.blocks).astype(np.int64)))]
    want = per_target(*everything[0]) / validation.targets(everything[0][1])
    for world, mb in [(1, 1), (1, 4), (2, 1), (2, 2), (3, 2), (4, 4), (8, 1)]:
        passes, seen, total, count = set(), [], 0.0, 0
        for rank in range(world):
            batches = list(val.micro_batches(mb, world, rank))
            passes.add(len(batches))
            for ids, labels in batches:
                assert ids.shape == (mb, 6)
                total += per_target(ids, labels)
                count += validation.targets(labels)
                seen += [int(i) for i, l in zip(ids[:, 0], labels) if (l != -100).any()]
        assert len(passes) == 1, (world, mb)  # the same number of forward passes on every rank (ZeRO-3, FSDP)
        assert total / count == pytest.approx(want, rel=1e-12), (world, mb)
        if not with_labels:
            assert sorted(seen) == sorted(int(b) for b in val.blocks[:, 0])  # every block once, fillers not counted


def test_validation_is_due_every_n_steps_and_after_the_last():
    assert [s for s in range(1, 11) if validation.due(s, None, 10)] == [10]
    assert [s for s in range(1, 11) if validation.due(s, 4, 10)] == [4, 8, 10]
    assert [s for s in range(1, 4) if validation.due(s, 1, 3)] == [1, 2, 3]


def _fit(folder, blocks: np.ndarray, val: validation.ValidationSet | None):
    """Three optimizer steps of the real LlamaModule (tiny, fp32, one CPU process, accumulation 2) -> the recorder."""
    from shardlab.core import registry
    from shardlab.core.config import RunConfig
    from shardlab.recipes.datamodule import LlamaData
    from shardlab.recipes.evaluate import Validation
    from shardlab.recipes.metrics import StepRecorder
    from shardlab.recipes.module import LlamaModule
    from shardlab.recipes.resolve import resolve_run
    from shardlab.recipes.weights import model_source

    run = resolve_run(RunConfig(accelerator="cpu", devices=1, max_steps=3, micro_batch_size=2, grad_accum=2, seq_len=32,
                                strategy="ddp"), for_run=False)
    pl.seed_everything(0, verbose=False)
    module = LlamaModule(model_source(folder), registry.get("ddp").build(), run.context(), run.optimizer())
    recorder = StepRecorder()
    callbacks = [recorder] + ([Validation(val, recorder, 1, 3)] if val else [])
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=3, accumulate_grad_batches=2, logger=False,
                         use_distributed_sampler=False, enable_checkpointing=False, enable_model_summary=False,
                         enable_progress_bar=False, callbacks=callbacks)
    trainer.fit(module, datamodule=LlamaData(blocks, 2, seed=0, grad_accum=2))
    assert module.model.training  # back in train mode
    return recorder


def test_a_run_that_validates_trains_exactly_as_one_that_does_not(cache_dir, monkeypatch):
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    from shardlab.recipes.model import initial_folder

    folder = initial_folder("tiny", 42)
    corpus = data.token_blocks([data.embedded_corpus()[:20_000]], __import__("shardlab.recipes.model", fromlist=["x"])
                               .byte_tokenizer(), 32).numpy().astype(np.uint32)
    train_rows, val_rows = validation.split_rows(len(corpus), 0.1, seed=42)
    blocks = validation.Rows(corpus, train_rows)
    plain = _fit(folder, blocks, None)
    validated = _fit(folder, blocks, validation.ValidationSet(validation.Rows(corpus, val_rows)))
    assert validated.losses == plain.losses  # bit for bit: validating after every step changes no training step
    assert [v["step"] for v in validated.val_losses] == [1, 2, 3] and not plain.val_losses
    assert all(v["tokens"] == len(val_rows) * 31 for v in validated.val_losses)  # every token but each block's first
    assert validated.val_losses[-1]["loss"] < validated.val_losses[0]["loss"]


# (world size, micro-batch, grad-accum): splits of one global batch of 8 sequences
SPLITS = [(1, 8, 1), (2, 2, 2), (4, 2, 1), (2, 4, 1), (1, 2, 4)]


@pytest.mark.parametrize("val_batches", [1, 2, 3, None])
def test_val_batches_validates_on_the_first_global_batches_under_every_split(val_batches):
    """--val-batches N: the launching process counts N global batches of the validation set (all of it at most), and
    every rank, at every split of the global batch, deals those first sequences of it (data order) as it deals the set."""
    from shardlab.core.config import RunConfig

    corpus = np.arange(100 * 8, dtype=np.uint32).reshape(100, 8)  # block i starts with 8 i
    held = validation.split_rows(100, 0.2, seed=42)[1]  # --val-split 0.2 holds out 20, in data order
    want = {1: 8, 2: 16, 3: 20, None: 20}[val_batches]
    said = {} if val_batches is None else {"validated_sequences": want}  # said only with --val-batches
    for world, mb, accum in SPLITS:
        c = RunConfig(val_split=0.2, val_batches=val_batches, micro_batch_size=mb, grad_accum=accum, seq_len=8, seed=42)
        summary, _ = validation.prepare_validation(c, 100, folder=None, world_size=world)
        assert summary == {"source": "--val-split 0.2", "sequences": 20, "trained_sequences": 80, **said}
        train, _, val = validation.split_for_validation(corpus, None, 0.2, c.seed, limit=summary.get("validated_sequences"))
        assert len(train) == 80 and isinstance(val.blocks, validation.Rows)  # still rows of the memory map
        passes, seen = set(), []
        for rank in range(world):
            batches = list(val.micro_batches(mb, world, rank))
            passes.add(len(batches))
            seen += [int(ids[k, 0]) // 8 for ids, labels in batches for k in range(mb) if (labels[k] != -100).any()]
        assert len(passes) == 1 and sorted(seen) == held[:want].tolist(), (world, mb, accum)  # the first `want`, once each
    assert validation.ValidationSet(corpus).first(7).blocks.base is not None  # --val-data's: a view, nothing read


def test_val_batches_is_said_and_bad_values_refused_in_one_line(cache_dir, tmp_path, capsys, monkeypatch):
    from shardlab.recipes import cli

    assert validation.cap_note(None, {"sequences": 20, "validated_sequences": 20}) == ""
    assert validation.cap_note(2, {"sequences": 20, "validated_sequences": 16}) == (
        "\nvalidation: --val-batches 2: the first 16 of the 20 validation sequences validated on")
    assert validation.cap_note(9, {"sequences": 20, "validated_sequences": 20}).endswith("(all of them: the set is no larger)")
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    for flags, expected in [(["--val-split", "0.1", "--val-batches", "0"], "--val-batches: must be at least 1 (global "
                             "batches of the validation set to validate on); leave it out to validate on the whole set (got '0')"),
                            (["--val-batches", "2"], "--val-batches 2: there is no validation set; give --val-data PATH or "
                             "--val-split F too")]:
        rc = cli.main(["run", "--accelerator", "cpu", "--output", str(tmp_path / "out"), *flags])
        err = capsys.readouterr().err
        assert rc == 2 and err.strip().splitlines() == [f"recipe: error: {expected}"] and not (tmp_path / "out").exists()


def test_a_run_says_how_many_sequences_it_validates_on(cache_dir, monkeypatch, tmp_path):
    """What `recipe run --val-split 0.1 --val-batches 2` hands its ranks (2 CPU ranks, micro-batch 4): summary.json's
    data.validation and the line it prints; each rank then takes the first validated_sequences of the held-out blocks."""
    from shardlab.core.config import RunConfig
    from shardlab.recipes.run import prepare

    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    p = prepare(RunConfig(accelerator="cpu", devices=2, val_split=0.1, val_batches=2, output=str(tmp_path / "out")))
    assert p.data["validation"] == {"source": "--val-split 0.1", "sequences": 141, "trained_sequences": 1269,
                                    "validated_sequences": 16}
    assert p.data_note.endswith("\nvalidation: --val-split 0.1: 141 of the 1410 sequences held out (seeded by --seed), 1269 "
                                "trained on\nvalidation: --val-batches 2: the first 16 of the 141 validation sequences "
                                "validated on")
