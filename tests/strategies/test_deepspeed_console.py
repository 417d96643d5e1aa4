"""DeepSpeed's console (strategies/deepspeed_console.py): a one-off op build is announced before its minute of
silence, and its "built successfully" lines are dropped while everything else it prints is kept."""
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


def test_init_drops_the_built_successfully_lines_and_keeps_the_rest(capsys):
    with deepspeed_console.quiet_init(rank_zero=False):
        print("DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully")
        print("something a user should see")
    assert capsys.readouterr().out == "something a user should see\n"
