"""FSDP2 loads a model without it ever being whole in one process: built on the meta device, sharded, then
each rank reads only its own rows, one tensor at a time. Two real gloo processes, peak RSS measured."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MiB = 2**20


def _hwm_reset() -> bool:
    try:  # writing 5 to clear_refs resets VmHWM, the peak resident set (Linux >= 4.0)
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status(key: str) -> int:
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))
    return int(line.split()[1]) * 1024


def _rank(rank: int, world: int, folder: str, port: int, out: str) -> None:
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from shardlab.recipes.weights import model_source
    from shardlab.strategies.fsdp import load_shards

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    source = model_source(Path(folder))
    model = source.build_empty(meta=True)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    dist.barrier()
    _hwm_reset()
    base = _status("VmRSS")
    load_shards(model, source, torch.device("cpu"))
    streamed = _status("VmHWM") - base
    shard_bytes = sum(p.to_local().numel() * 4 for p in model.parameters())
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    result = {"streamed": streamed, "shard_bytes": shard_bytes, "tied": model.lm_head.weight is model.model.embed_tokens.weight}
    if rank == 0:
        expected = load_file(str(Path(folder) / "model.safetensors"))
        result["equal"] = all(full[k].equal(v) for k, v in expected.items())
    dist.barrier()
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    from shardlab.recipes.ranks import finish_rank

    finish_rank()  # as a run's ranks end: gloo's threads can abort a finished rank in interpreter teardown


@pytest.fixture(scope="module")
def mid_folder(module_folder) -> Path:
    """A tied Llama of 38.5M parameters (154 MB in fp32): big enough for RSS to tell the loaders apart."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = module_folder("mid-llama")
    config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=32000, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_fsdp_loader_reads_each_ranks_rows_only(mid_folder, tmp_path):
    if not _hwm_reset():
        pytest.skip("this kernel cannot reset VmHWM (/proc/self/clear_refs)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(2, str(mid_folder), port, str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    model_bytes = 38_535_680 * 4
    largest = 32000 * 512 * 4  # the tied embedding, fp32
    assert ranks[0]["equal"] and all(r["tied"] for r in ranks)  # every rank's rows are the folder's, tie kept
    for r in ranks:
        # the rank's own shards plus about one slice of one tensor in flight, never the whole model
        assert r["streamed"] <= r["shard_bytes"] + largest // 2 + 16 * MiB, r
        assert r["streamed"] <= 0.55 * model_bytes, r  # from_pretrained in every rank held all of it
    print({k: [round(r[k] / MiB, 1) for r in ranks] for k in ("streamed", "shard_bytes")})
