# Diagnostic for this folder's calls (not part of shardlab): with SHARDLAB_ACT_BUDGET=B in the environment, torch.compile's
# min-cut partitioner keeps at most about B of the activations it would keep by default and recomputes the rest in
# backward (torch._functorch.config.activation_memory_budget). Put on PYTHONPATH as sitecustomize.py.
import os

if os.environ.get("SHARDLAB_ACT_BUDGET"):
    import torch._functorch.config as functorch_config

    functorch_config.activation_memory_budget = float(os.environ["SHARDLAB_ACT_BUDGET"])
