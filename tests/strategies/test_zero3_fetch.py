"""ZeRO-3 fetches each decoder layer whole (one DeepSpeed leaf module), and the memory model counts that unit."""
from __future__ import annotations

from deepspeed.utils import z3_leaf_module

from shardlab.core import memory, registry
from shardlab.recipes import model as model_lib
from shardlab.recipes.weights import model_source


def test_zero3_marks_every_decoder_layer_as_one_fetch(cache_dir, monkeypatch):
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    source = model_source(model_lib.initial_folder("tiny", seed=0))
    model = registry.get("zero3").build().build_model(source, module=None, ctx=None)  # one process: nothing partitioned
    assert all(z3_leaf_module(layer) for layer in model.model.layers)
    assert not z3_leaf_module(model) and not z3_leaf_module(model.model)
    # the weights are copied from the folder (build_empty leaves them uninitialised)
    assert model.lm_head.weight.equal(source.load_full().lm_head.weight)


def test_zero3_estimate_fetches_a_decoder_layer():
    s = memory.shape_of(model_lib.model_config("llama-70b"))
    assert s.decoder_layer_params > s.largest_layer_params  # 70B: a layer outweighs the embedding
    work = memory.Workload(micro_batch_size=1, seq_len=4096, activation_checkpointing=True, precision="bf16-mixed",
                           gpus_per_node=8, num_nodes=1)
    est = registry.get("zero3").build().model_state_bytes(s, work)
    # through backward: the fetched layer and 16 bytes per parameter over 8 ranks; the step adds 6 (strategies/deepspeed.py)
    assert est.gpu - est.step_only == 4 * s.decoder_layer_params + int(16 * s.params / 8)
