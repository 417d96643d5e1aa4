"""`recipe launch --print --launcher slurm`: a batch script to submit as is. Printed in this process (in_process,
tests/conftest.py); the script itself is read by bash, with stand-ins for SLURM's own scontrol and srun."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

CLUSTER = ("launch", "--print", "--launcher", "slurm", "--num-nodes", "2", "--devices", "4", "--master-port", "29500",
           "--strategy", "zero3", "--accelerator", "gpu", "--micro-batch-size", "4", "--max-steps", "100")


def _sbatch(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", script, re.M))


def test_slurm_print_is_a_whole_batch_script(in_process, tmp_path):
    rc, out, err = in_process(*CLUSTER, "--job-name", "llama-ft", "--cpus-per-task", "12", "--partition", "gpu",
                              "--time", "02:00:00", "--output", tmp_path / "run")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert _sbatch(out) == {"job-name": "llama-ft", "nodes": "2", "ntasks-per-node": "4", "gpus-per-node": "4",
                            "cpus-per-task": "12", "output": "%x-%j.out", "partition": "gpu", "time": "02:00:00"}
    # sbatch reads #SBATCH lines only before the first command
    first_command = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
    assert max(i for i, l in enumerate(lines) if l.startswith("#SBATCH")) < first_command
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in lines
    assert "export MASTER_PORT=29500" in lines
    srun = shlex.split(lines[-1])
    assert srun[:5] == ["srun", "--nodes", "2", "--ntasks-per-node", "4"] and "--kill-on-bad-exit=1" in srun
    run = srun[srun.index(sys.executable):]
    assert run[1:5] == ["-m", "shardlab.recipes.cli", "run", "--num-nodes"] and "--launcher" not in run
    for flag, value in (("--num-nodes", "2"), ("--devices", "4"), ("--strategy", "zero3"), ("--max-steps", "100"),
                        ("--output", str(tmp_path / "run"))):
        assert run[run.index(flag) + 1] == value
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0  # bash parses it


def test_the_script_sets_the_rendezvous_and_starts_every_task(in_process, tmp_path):
    rc, out, err = in_process(*CLUSTER)
    assert rc == 0, err
    job = tmp_path / "job.sbatch"
    job.write_text(out)
    bin_ = tmp_path / "bin"  # SLURM's commands as they answer inside an allocation of node-a and node-b
    bin_.mkdir()
    (bin_ / "scontrol").write_text('#!/bin/bash\n[ "$*" = "show hostnames node-[a-b]" ] && printf "node-a\\nnode-b\\n"\n')
    (bin_ / "srun").write_text('#!/bin/bash\necho "$MASTER_ADDR $MASTER_PORT" > "$SEEN"\nprintf "%s\\n" "$@" >> "$SEEN"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    seen = tmp_path / "seen"
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node-[a-b]",
           "SEEN": str(seen)}
    proc = subprocess.run(["bash", str(job)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rendezvous, *argv = seen.read_text().splitlines()
    assert rendezvous == "node-a 29500"
    assert argv == shlex.split(out.splitlines()[-1])[1:]


def test_cpu_processes_get_no_gpus_and_a_default_job_name(in_process):
    rc, out, err = in_process("launch", "--print", "--launcher", "slurm", "--num-nodes", "3", "--devices", "2",
                              "--master-port", "29500", "--strategy", "ddp", "--accelerator", "cpu")
    assert rc == 0, err
    s = _sbatch(out)
    assert "gpus-per-node" not in s and s["job-name"] == "shardlab-ddp" and s["ntasks-per-node"] == "2"
    assert s["cpus-per-task"] == "8" and "partition" not in s and "time" not in s


def test_torchrun_print_ends_with_the_batch_script(in_process):
    rc, out, err = in_process("launch", "--print", "--num-nodes", "2", "--devices", "4", "--master-addr", "10.1.2.3",
                              "--master-port", "29500", "--strategy", "zero3", "--accelerator", "cpu")
    assert rc == 0, err
    assert out.index("node 1: torchrun") < out.index("# slurm: a batch script") < out.index("#!/bin/bash")
    assert _sbatch(out)["nodes"] == "2"


@pytest.mark.parametrize("flags,expected", [
    (["--num-nodes", "2", "--devices", "4"], "--master-port: give a free TCP port"),
    (["--num-nodes", "2", "--master-port", "29500"], "--devices: give the processes per node"),
    (["--num-nodes", "2", "--devices", "4", "--master-port", "29500", "--job-name", "interactive"],
     "--job-name interactive: Lightning takes a SLURM job of that name for an interactive shell"),
    (["--num-nodes", "2", "--devices", "4", "--master-port", "29500", "--cpus-per-task", "0"], "--cpus-per-task 0"),
])
def test_slurm_script_refusals(in_process, flags, expected):
    rc, out, err = in_process("launch", "--print", "--launcher", "slurm", "--accelerator", "cpu", *flags)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and expected in lines[0] and not out, err
