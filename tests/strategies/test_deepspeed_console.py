"""DeepSpeed's console (strategies/deepspeed_console.py): CPU Adam's one-off build is announced before its minute of
silence; the shared-memory op, which only inference uses, is not built."""
from __future__ import annotations

from shardlab.strategies import deepspeed_console


def test_cpu_adam_build_is_announced_only_when_the_op_is_not_built(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # where DeepSpeed's JIT build looks: nothing there
    assert not deepspeed_console.cpu_adam_built()
    deepspeed_console.announce_cpu_adam_build(rank_zero=False)
    deepspeed_console.announce_cpu_adam_build(rank_zero=True)
    assert capsys.readouterr().out == deepspeed_console.CPU_ADAM_BUILD + "\n"
    assert "once, about a minute" in deepspeed_console.CPU_ADAM_BUILD
    (tmp_path / "cpu_adam").mkdir(exist_ok=True)  # torch creates the folder when asked for it
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")  # what a finished build leaves
    assert deepspeed_console.cpu_adam_built()
    deepspeed_console.announce_cpu_adam_build(rank_zero=True)
    assert capsys.readouterr().out == ""


def test_training_does_not_build_the_inference_only_shared_memory_op():
    """DeepSpeed's CPU backend would compile deepspeed_shm_comm at init_distributed (about a minute, once); the ZeRO runs
    of this suite train without it (test_console.py: no "built successfully" line, no announcement)."""
    import importlib

    ds_torch = importlib.import_module("deepspeed.comm.torch")  # the module (deepspeed.comm.torch is torch itself)

    build = ds_torch.build_shm_op
    with deepspeed_console.without_shm_op():
        assert ds_torch.build_shm_op() is None
    assert ds_torch.build_shm_op is build
