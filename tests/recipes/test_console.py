"""What a run prints while it trains (issue 22, item 4): its progress line, and none of the libraries' messages a
user cannot act on."""
from __future__ import annotations

from tests.conftest import LLAMA3

# Each with where it came from: Lightning's checkpoint dump, DeepSpeed's collectives (torch deprecations), Lightning's
# advert, DeepSpeed's accelerator probe and shared-memory op, Lightning's ZeRO-3 checkpoint note and init lines, its
# Rich bar in a run counted in steps.
NOISE = ("`weights_only` was not set", "FutureWarning", "all_gather_into_tensor", "reduce_scatter_tensor", "litlogger",
         "Setting accelerator to CPU", "built successfully", "When saving the DeepSpeed Stage 3 checkpoint",
         "initializing deepspeed distributed", "GPU available", "TPU available", "`Trainer.fit` stopped",
         "LeafSpec", "is deprecated", "Epoch 0/")


def test_zero3_offload_with_checkpoints_prints_progress_and_no_library_noise(train):
    # the Llama-3 shape's zero3_offload run that test_parity.py trains (2 ranks, 3 steps, a checkpoint at step 2)
    run = train("zero3_offload", *LLAMA3)
    log = run["log"]
    for noise in NOISE:
        assert noise not in log, (noise, log[-4000:])
    lines = log.splitlines()
    assert any(l.startswith("shardlab: step 1/3  loss ") and "tokens/s" in l and l.endswith(" left") for l in lines), log
    assert any(l.startswith("shardlab: step 3/3  loss ") and l.endswith("done") for l in lines), log
    assert sum(l.startswith("shardlab: step 3/3") for l in lines) == 1  # from rank 0 only
    assert any(l.startswith("shardlab: loss ") for l in lines), log


def test_progress_line_reads_step_loss_throughput_and_time_left():
    from shardlab.recipes import progress

    assert progress.line(3, 200, 5.43219, 13543.4, 125.0) == "shardlab: step 3/200  loss 5.4322  13,543 tokens/s  2m05s left"
    assert progress.line(200, 200, 2.1, 9000, 0.0).endswith("9,000 tokens/s  done")
    # the newest validation loss: on its own step's line, then with the step it was taken at
    assert progress.line(50, 200, 5.43219, 13543.4, 125.0, {"step": 50, "loss": 5.61234}) == \
        "shardlab: step 50/200  loss 5.4322  val 5.6123  13,543 tokens/s  2m05s left"
    assert "loss 5.4322  val 5.6123 (step 50)  13,543 tokens/s" in progress.line(51, 200, 5.43219, 13543.4, 1.0,
                                                                                {"step": 50, "loss": 5.61234})
    assert [progress.duration(s) for s in (4.6, 59, 61, 3 * 3600 + 7 * 60 + 5)] == ["5s", "59s", "1m01s", "3h07m"]
    assert progress.is_progress("shardlab: step 3/200  loss 5.4322") and not progress.is_progress("shardlab: zero3 on")


# Progress with gradient accumulation (one line per optimizer step, not per micro-batch) and from rank 0 only:
# test_compare.py's four-family compare reads its runs' logs.
