"""`recipe launch`: one `recipe run` across nodes through torchrun (or SLURM's srun), validated first.

On each node: `recipe launch --num-nodes N --node-rank R --master-addr HOST --master-port P --devices D
[flags of recipe run]`. `--print` shows the command for every node, in torchrun and accelerate forms, and a
SLURM batch script; `--print --launcher slurm` prints the script alone (`... > job.sbatch; sbatch job.sbatch`).
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from typing import Any

from shardlab.core.config import RunConfig, load_config
from shardlab.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from shardlab.recipes.flags import add_run_arguments

    parser.add_argument("--print", dest="print_only", action="store_true",
                        help="print every node's command and a SLURM batch script, and exit (with --launcher slurm: the script alone)")
    slurm = parser.add_argument_group("SLURM batch script (--print)")
    slurm.add_argument("--job-name", help="#SBATCH --job-name (default: shardlab-STRATEGY); its log is JOBNAME-JOBID.out")
    slurm.add_argument("--cpus-per-task", type=int, default=8, help="#SBATCH --cpus-per-task: CPU cores per rank (default: 8)")
    slurm.add_argument("--partition", help="#SBATCH --partition (default: the cluster's)")
    slurm.add_argument("--time", help="#SBATCH --time, e.g. 04:00:00 (default: the partition's limit)")
    add_run_arguments(parser)


LAUNCH_FIELDS = ("launcher", "node_rank", "master_addr", "master_port")


def _run_argv(overrides: dict[str, Any], config: str | None) -> list[str]:
    argv = ["--config", config] if config else []
    for name, value in overrides.items():
        if name in LAUNCH_FIELDS:  # torchrun takes these; `recipe run` reads the environment it sets
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return argv


def validate(cfg: RunConfig, args: argparse.Namespace) -> list[str]:
    """Every problem at once, each naming its flag."""
    problems = []
    if cfg.devices == "auto":
        problems.append("--devices: give the processes per node (GPUs per node, or CPU processes)")
    if cfg.master_port is None:
        problems.append("--master-port: give a free TCP port on node 0, the same on every node")
    if cfg.num_nodes > 1 and not cfg.master_addr and cfg.launcher != "slurm":  # SLURM: node 0 of the allocation
        problems.append("--master-addr: give the address of node 0 (every node must reach it)")
    if not args.print_only and cfg.launcher == "torchrun" and cfg.node_rank is None:
        problems.append(f"--node-rank: give this node's rank, 0..{cfg.num_nodes - 1}")
    if cfg.devices != "auto":
        world = cfg.num_nodes * cfg.devices
        env_world = os.environ.get("WORLD_SIZE") if cfg.launcher == "torchrun" else os.environ.get("SLURM_NTASKS")
        if env_world and int(env_world) != world:
            problems.append(f"--num-nodes {cfg.num_nodes} x --devices {cfg.devices} = {world} processes, but the "
                            f"environment says {env_world} ({'WORLD_SIZE' if cfg.launcher == 'torchrun' else 'SLURM_NTASKS'})")
        if cfg.launcher == "slurm" and os.environ.get("SLURM_NNODES") and int(os.environ["SLURM_NNODES"]) != cfg.num_nodes:
            problems.append(f"--num-nodes {cfg.num_nodes}: SLURM_NNODES is {os.environ['SLURM_NNODES']}")
    if getattr(args, "job_name", None) in ("bash", "interactive"):  # Lightning then ignores SLURM's variables
        problems.append(f"--job-name {args.job_name}: Lightning takes a SLURM job of that name for an interactive "
                        f"shell and ignores its tasks; pick another name")
    if getattr(args, "cpus_per_task", 1) < 1:
        problems.append(f"--cpus-per-task {args.cpus_per_task}: give at least 1")
    return problems


def commands(cfg: RunConfig, run_argv: list[str]) -> dict[str, list[list[str]]]:
    addr = cfg.master_addr or "127.0.0.1"
    torchrun = [["torchrun", "--nnodes", str(cfg.num_nodes), "--node-rank", str(r), "--nproc-per-node", str(cfg.devices),
                 "--master-addr", addr, "--master-port", str(cfg.master_port), "-m", "shardlab.recipes.cli", "run", *run_argv]
                for r in range(cfg.num_nodes)]
    accelerate = [["accelerate", "launch", "--num_machines", str(cfg.num_nodes), "--machine_rank", str(r),
                   "--num_processes", str(cfg.num_nodes * cfg.devices), "--main_process_ip", addr,
                   "--main_process_port", str(cfg.master_port), "--module", "shardlab.recipes.cli", "run", *run_argv]
                  for r in range(cfg.num_nodes)]
    # one task per rank: each runs `recipe run`, which Lightning's SLURMEnvironment places from SLURM's variables
    srun = [["srun", "--nodes", str(cfg.num_nodes), "--ntasks-per-node", str(cfg.devices), "--kill-on-bad-exit=1",
             sys.executable, "-m", "shardlab.recipes.cli", "run", *run_argv]]
    return {"torchrun": torchrun, "accelerate": accelerate, "slurm": srun}


def sbatch_script(cfg: RunConfig, srun: list[str], args: argparse.Namespace) -> str:
    """A batch script to submit as is: the allocation, the rendezvous on the allocation's first node, the srun line."""
    job = args.job_name or f"shardlab-{cfg.strategy}"
    lines = ["#!/bin/bash",
             f"# shardlab: recipe run on {cfg.num_nodes} node(s) x {cfg.devices} rank(s), one SLURM task per rank.",
             "# Submit with: sbatch THIS_FILE; the log is JOBNAME-JOBID.out in the directory you submit from.",
             f"#SBATCH --job-name={job}",
             f"#SBATCH --nodes={cfg.num_nodes}",
             f"#SBATCH --ntasks-per-node={cfg.devices}"]
    if cfg.accelerator != "cpu":
        lines.append(f"#SBATCH --gpus-per-node={cfg.devices}")
    lines += [f"#SBATCH --cpus-per-task={args.cpus_per_task}", "#SBATCH --output=%x-%j.out"]
    lines += [f"#SBATCH --{k}={v}" for k, v in (("partition", args.partition), ("time", args.time)) if v]
    lines += ["set -eu",
              "",
              "# rendezvous: the first node of the allocation is node 0 (Lightning reads MASTER_ADDR and MASTER_PORT)",
              'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
              f"export MASTER_PORT={cfg.master_port}",
              "# network: `recipe doctor` on a node shows NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE, NCCL_DEBUG, ... and checks them",
              "",
              "# the Python that printed this script (shardlab installed); every node must see it at this path",
              shlex.join(srun)]
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields}
    cfg = load_config(getattr(args, "config", None), overrides)
    problems = validate(cfg, args)
    if problems:
        raise UserError("; ".join(problems))
    run_argv = _run_argv({**overrides, "num_nodes": cfg.num_nodes, "devices": cfg.devices}, getattr(args, "config", None))
    if args.print_only:  # resolved for the cluster, from the config alone: nothing is built or tokenised
        from shardlab.recipes.resolve import resolve_run

        resolve_run(cfg, for_run=False, need_memory=False)
    else:
        from shardlab.recipes.run import prepare

        prepare(cfg)  # the same checks `recipe run` makes, before any process starts
    forms = commands(cfg, run_argv)
    if args.print_only:
        script = sbatch_script(cfg, forms["slurm"][0], args)
        if cfg.launcher == "slurm":  # the script alone, to redirect into a file
            print(script, end="")
            return 0
        for form in ("torchrun", "accelerate"):
            print(f"# {form}")
            for r, cmd in enumerate(forms[form]):
                print(f"node {r}: {shlex.join(cmd)}")
        print("# slurm: a batch script (`recipe launch --print --launcher slurm ... > job.sbatch`, then `sbatch job.sbatch`)")
        print(script, end="")
        return 0
    if cfg.launcher == "slurm":
        cmd = [sys.executable, "-m", "shardlab.recipes.cli", "run", *run_argv]  # srun started one task per process
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", *forms["torchrun"][cfg.node_rank][1:]]
    return subprocess.call(cmd, env=launch_env(cfg))


def launch_env(cfg: RunConfig) -> dict[str, str]:
    """The environment torchrun starts this node's ranks in: torchrun gives each of several ranks one CPU thread
    (OMP_NUM_THREADS=1) unless it is set, which leaves an offloaded optimizer's CPU step (DeepSpeed's CPU Adam) on one
    core a rank; the node's cores are shared out instead, as `recipe run` does (recipes/ranks.py). srun's tasks keep
    their --cpus-per-task, which OpenMP reads from their affinity."""
    from shardlab.recipes.ranks import thread_env

    return {**os.environ, **(thread_env(cfg.devices) if cfg.launcher == "torchrun" else {})}
