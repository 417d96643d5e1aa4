"""`recipe launch`: one `recipe run` across nodes through torchrun (or SLURM's srun), validated first.

On each node: `recipe launch --num-nodes N --node-rank R --master-addr HOST --master-port P --devices D
[flags of recipe run]`. `--print` shows the command for every node, in torchrun and accelerate forms.
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
    from shardlab.recipes.run import add_run_arguments

    parser.add_argument("--print", dest="print_only", action="store_true", help="print every node's command and exit")
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
    if cfg.num_nodes > 1 and not cfg.master_addr:
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
    srun = [["srun", "--nodes", str(cfg.num_nodes), "--ntasks-per-node", str(cfg.devices), "recipe", "run", *run_argv]]
    return {"torchrun": torchrun, "accelerate": accelerate, "slurm": srun}


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
        for form in ("torchrun", "accelerate"):
            print(f"# {form}")
            for r, cmd in enumerate(forms[form]):
                print(f"node {r}: {shlex.join(cmd)}")
        print("# slurm (one line, from the batch script)")
        print(shlex.join(forms["slurm"][0]))
        return 0
    if cfg.launcher == "slurm":
        cmd = [sys.executable, "-m", "shardlab.recipes.cli", "run", *run_argv]  # srun started one task per process
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", *forms["torchrun"][cfg.node_rank][1:]]
    return subprocess.call(cmd)
