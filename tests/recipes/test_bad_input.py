"""Bad input: one line naming the flag and the fix, exit code 2, no traceback, nothing in --output."""
from __future__ import annotations

import json
import shutil

import pytest

from shardlab.recipes.model import SHAPES
from tests.conftest import CHAT_DATA, LLAMA3


def _cases(tmp):
    (tmp / "notllama").mkdir()
    (tmp / "notllama" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp / "noweights").mkdir()  # a whole Llama config, no weights: plans, does not train
    (tmp / "noweights" / "config.json").write_text(json.dumps(SHAPES["tiny-llama3"]))
    (tmp / "biased").mkdir()  # a Llama config with biases in its attention projections (Qwen-style)
    (tmp / "biased" / "config.json").write_text(json.dumps({**SHAPES["tiny-llama3"], "attention_bias": True}))
    (tmp / "noshape").mkdir()
    (tmp / "noshape" / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 320}))
    (tmp / "empty").mkdir()
    (tmp / "blank.txt").write_text("   \n")
    (tmp / "bad.jsonl").write_text('{"text": "ok"}\nnot json\n')
    import pandas as pd

    pd.DataFrame({"body": ["x"]}).to_parquet(tmp / "nocol.parquet")
    (tmp / "nofield.jsonl").write_text('{"body": "x"}\n')
    turn = lambda role, content: {"role": role, "content": content}  # noqa: E731
    (tmp / "role.jsonl").write_text(json.dumps({"messages": [turn("user", "q"), turn("robot", "a")]}) + "\n")
    (tmp / "noanswer.jsonl").write_text(json.dumps({"messages": [turn("user", "q"), turn("assistant", "a")]}) + "\n" +
                                        json.dumps({"messages": [turn("system", "s"), turn("user", "q")]}) + "\n")
    (tmp / "long.jsonl").write_text(json.dumps({"prompt": "p" * 300, "completion": "c"}) + "\n")
    (tmp / "bad.yaml").write_text("a: [\n")
    (tmp / "unknown.yaml").write_text("colour: red\n")
    return {
        "unknown strategy": (["--strategy", "zero4"], "known: ddp"),
        "missing model folder": (["--model", tmp / "nope"], "neither a shipped model nor an existing path"),
        "unknown model name": (["--model", "llama-9b"], "known: "),
        "not a llama folder": (["--model", tmp / "notllama"], "model_type is 'gpt2'"),
        "not a llama config.json": (["--model", tmp / "notllama" / "config.json"], "model_type is 'gpt2'"),
        "llama config without its shape": (["--model", tmp / "noshape"],
                                           "lacks hidden_size, intermediate_size, num_hidden_layers, num_attention_heads"),
        "llama folder without weights": (["--model", tmp / "noweights"], "no weight files (*.safetensors) in the folder: training needs weights"),
        "config.json alone": (["--model", tmp / "noweights" / "config.json"], "`recipe plan --model"),
        "a text file as the model": (["--model", tmp / "blank.txt"], "is a file, not a model folder or config.json"),
        "data folder without text files": (["--data", tmp / "empty"], "no .txt, .md, .jsonl, .json, .parquet or .csv"),
        "data without the field asked for": (["--data", tmp / "nofield.jsonl", "--data-field", "content"],
                                             "its records have no 'content' field (they have: body); give --data-field"),
        "parquet without the column": (["--data", tmp / "nocol.parquet"], "its records have no 'text' field (they have: body)"),
        "data workers 0": (["--data-workers", "0"], "--data-workers"),
        "data with no text": (["--data", tmp / "blank.txt"], "hold no text"),
        "corrupt jsonl": (["--data", tmp / "bad.jsonl"], "line 2 is not JSON"),
        "chat with an unknown role": (["--data", tmp / "role.jsonl"], f"{tmp / 'role.jsonl'}: record 1: message 2 has role 'robot'"),
        "chat without an assistant turn": (["--data", tmp / "noanswer.jsonl"], "record 2: its 'messages' have no assistant turn"),
        "records without the format asked for": (["--data", tmp / "nofield.jsonl", "--data-format", "chat"],
                                                 "its records have no 'messages' field (they have: body)"),
        "every example dropped": (["--data", tmp / "long.jsonl", "--long-examples", "drop"], "no example is left to train on"),
        "unknown data format": (["--data-format", "sharegpt"], "--data-format"),
        "missing data": (["--data", tmp / "nope.txt"], "no such file"),
        "missing validation data": (["--val-data", tmp / "nope.txt"], f"--val-data {tmp / 'nope.txt'}: no such file"),
        "bad validation data": (["--val-data", tmp / "bad.jsonl"], f"--val-data {tmp / 'bad.jsonl'}: line 2 is not JSON"),
        "validation data and split": (["--val-data", CHAT_DATA, "--val-split", "0.1"],
                                      f"--val-data {CHAT_DATA} and --val-split 0.1: give one of them"),
        "validation split too large": (["--val-split", "0.6"], "--val-split: Input should be less than or equal to 0.5"),
        "validation every without a set": (["--val-every", "5"], "--val-every 5: there is no validation set"),
        "too little data to hold out": (["--micro-batch-size", "500", "--val-split", "0.5"],
                                        "--val-split 0.5: --data gives 1410 blocks of 128 tokens; holding out 705 for "
                                        "validation leaves 705 to train on, but one optimizer step needs 1000"),
        "zero devices": (["--devices", "0"], "--devices"),
        "fp16 on cpu": (["--precision", "16-mixed"], "fp16 training needs a GPU"),
        "unknown precision": (["--precision", "fp8"], "--precision"),
        "offload without one": (["--strategy", "ddp", "--offload", "optimizer"], "no such CPU offload"),
        **{f"offload ratio under {s}": (["--strategy", s, "--offload-ratio", "0.5"],
                                        f"--offload-ratio 0.5: strategy '{s}' keeps no part of an offloaded optimizer on "
                                        f"the GPU; use zero3_offload, or drop --offload-ratio")
           for s in ("ddp", "fsdp", "fsdp_offload", "zero2_offload", "zero3", "zero3_offload_all")},
        "experiment the preset lacks": (["--strategy", "ddp", "--experiments", "fused-step"],
                                        "--experiments fused-step: strategy 'ddp' offers no experiment 'fused-step'; "
                                        "it offers: none; drop --experiments"),
        "unknown experiment": (["--strategy", "zero3", "--experiments", "lean-config,nope"],
                               "--experiments lean-config,nope: strategy 'zero3' offers no experiment 'nope'; it offers: "
                               "lean-config, fused-step, no-fetch-sync, param-lists, no-nvtx, late-wait"),
        "lever without the one it works through": (["--strategy", "zero3", "--experiments", "lean-config,late-wait"],
                                                   "--experiments lean-config,late-wait: late-wait works through "
                                                   "fused-step (its fused AdamW); add it: --experiments "
                                                   "lean-config,late-wait,fused-step"),
        "offload ratio 0": (["--strategy", "zero3_offload", "--offload-ratio", "0"], "--offload-ratio: Input should be greater than 0"),
        "offload ratio over 1": (["--strategy", "zero3_offload", "--offload-ratio", "1.5"], "--offload-ratio: Input should be less than or equal to 1"),
        "gpu without gpu": (["--accelerator", "gpu"], "no CUDA GPU"),
        "sequence too long": (["--seq-len", "4096"], "at most 2048"),
        "too little data": (["--micro-batch-size", "5000"], "one optimizer step needs"),
        "too little data for the accumulation": (["--grad-accum", "5000"], "x grad-accum); give more text"),
        "liger kernels on cpu": (["--kernels", "liger"], "run on CUDA GPUs only; use --kernels torch"),
        "expandable segments on cpu": (["--expandable-segments"], "--expandable-segments: it sets PyTorch's CUDA "
                                       "allocator, for GPU runs only; drop it or run with --accelerator gpu"),
        "unknown kernels": (["--kernels", "triton"], "--kernels"),
        "fused adds and compile": (["--fused-adds", "--compile"], "--fused-adds and --compile: torch.compile fuses "
                                   "these adds itself; give one of them"),
        "fused adds with biased projections": (["--model", tmp / "biased", "--fused-adds"], "has biases in its "
                                               "projections (attention_bias or mlp_bias), which the folded adds do not "
                                               "take; drop --fused-adds"),
        "direct-grads with 16-bit weights": (["--strategy", "fsdp", "--precision", "bf16-true", "--experiments",
                                              "direct-grads"], "--experiments direct-grads: under bf16-true the weights "
                                             "are 16-bit too, and direct-grads' AdamW steps fp32 weights; drop it"),
        "negative lr": (["--lr", "-1"], "--lr"),
        "not an int": (["--max-steps", "many"], "--max-steps"),
        "malformed yaml": (["--config", tmp / "bad.yaml"], "not valid YAML"),
        "unknown yaml field": (["--config", tmp / "unknown.yaml"], "--colour: unknown field"),
        "missing yaml": (["--config", tmp / "nope.yaml"], "no such file"),
        "unknown flag": (["--colour", "red"], "unrecognized arguments"),
        # SHARDLAB_AB (recipes/lever_ab.py): the third item is the environment the case runs under
        "an A/B of a lever the strategy cannot switch": (["--strategy", "zero3"], "SHARDLAB_AB=lean-config: strategy "
                                                         "'zero3' can switch no-fetch-sync", {"SHARDLAB_AB": "lean-config"}),
        "an A/B under a strategy with none": (["--strategy", "ddp"], "strategy 'ddp' has no lever that switches between "
                                              "steps", {"SHARDLAB_AB": "direct-cast"}),
        "an A/B of a lever the run does not have on": (["--strategy", "zero3", "--experiments", "lean-config"],
                                                       "--experiments lean-config,no-fetch-sync",
                                                       {"SHARDLAB_AB": "no-fetch-sync"}),
        "an A/B with too few steps": (["--strategy", "fsdp", "--max-steps", "16"], "need --max-steps 17 or more",
                                      {"SHARDLAB_AB": "direct-cast:3"}),
        "an A/B in blocks of one step": (["--strategy", "fsdp"], "a whole number >= 2", {"SHARDLAB_AB": "direct-cast:1"}),
    }


def test_bad_run_inputs(cache_dir, tmp_path, capsys, monkeypatch):
    from shardlab.recipes import cli  # called in this process, as in test_bad_inputs_across_commands

    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    failures = []
    for name, (flags, expected, *env) in _cases(tmp_path).items():
        for key, value in (env[0] if env else {}).items():
            monkeypatch.setenv(key, value)
        out = tmp_path / ("out-" + name.replace(" ", "-").replace("/", ""))
        args = ["run", "--output", out, *flags] if "--accelerator" in flags else ["run", "--accelerator", "cpu", "--output", out, *flags]
        rc = cli.main([str(a) for a in args])
        for key in (env[0] if env else {}):
            monkeypatch.delenv(key)
        err = capsys.readouterr().err
        lines = [l for l in err.splitlines() if l.startswith("recipe: error:")]
        if not (rc == 2 and len(lines) == 1 and expected in lines[0] and "Traceback" not in err and not out.exists()):
            failures.append(f"{name}: rc={rc} stderr={err[-400:]!r}")
    assert not failures, "\n".join(failures)


def test_bad_data_in_a_real_run(recipe, tmp_path):
    """One real `recipe` process: a record without the field asked for is exit code 2, one line, nothing in --output."""
    (tmp_path / "d.jsonl").write_text(json.dumps({"text": "a"}) + "\n" + json.dumps({"body": "b"}) + "\n")
    out = tmp_path / "out"
    proc = recipe("run", "--accelerator", "cpu", "--data", tmp_path / "d.jsonl", "--output", out)
    assert proc.returncode == 2 and not out.exists(), proc.stderr[-2000:]
    assert proc.stderr.strip() == f"recipe: error: --data {tmp_path / 'd.jsonl'}: record 2 has no 'text' field; give it one or remove the record"


def test_unknown_subcommand(recipe):
    proc = recipe("fly")
    assert proc.returncode == 2 and proc.stderr.startswith("recipe: error:")


@pytest.fixture(scope="module")
def checkpoints(train, module_folder):
    """A real checkpoint: the Llama-3 shape's under ddp at step 2 (LLAMA3, the run test_parity.py shares), copies of
    it broken; a local Llama folder of another shape."""
    import shutil

    from transformers import LlamaConfig, LlamaForCausalLM

    from shardlab.recipes.model import byte_tokenizer

    root = module_folder("ckpts")
    other = root / "other-shape"
    LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2, vocab_size=320, max_position_embeddings=256)).save_pretrained(other)
    byte_tokenizer().save_pretrained(other)
    ckpt = train.checkpoints("ddp", *LLAMA3) / "step-000002"
    corrupt, stateless = root / "corrupt" / "step-000002", root / "stateless" / "step-000002"
    shutil.copytree(ckpt, corrupt)
    (corrupt / "meta.json").write_text("{not json")
    shutil.copytree(ckpt, stateless)
    (stateless / "state").unlink()
    native = root / "native" / "step-000002"  # as --no-portable-checkpoints writes it: intact, no portable copy
    shutil.copytree(ckpt, native)
    shutil.rmtree(native / "portable")
    meta = json.loads((native / "meta.json").read_text())
    meta["files"] = {k: v for k, v in meta["files"].items() if not k.startswith("portable/")}
    (native / "meta.json").write_text(json.dumps(meta))
    return {"ddp": ckpt, "corrupt": corrupt, "stateless": stateless, "native": native, "root": root}


def _across_commands(tmp, ck):
    (tmp / "ds.json").write_text("{not json")
    (tmp / "nostage.json").write_text(json.dumps({"zero_optimization": {"overlap_comm": True}}))
    (tmp / "onecycle.json").write_text(json.dumps({"zero_optimization": {"stage": 2}, "scheduler": {"type": "OneCycle"}}))
    (tmp / "gpt2.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 768}))
    (tmp / "shapeless.json").write_text(json.dumps({"model_type": "llama", "intermediate_size": 176,
                                                    "num_attention_heads": 4, "vocab_size": 320}))
    (tmp / "notes.txt").write_text("a llama\n")
    shutil.copytree(ck["root"] / "other-shape", tmp / "mismatched")  # weights of one shape, a config of another
    config = json.loads((tmp / "mismatched" / "config.json").read_text())
    (tmp / "mismatched" / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    run = ["run", "--accelerator", "cpu", "--devices", "2", "--max-steps", "6"]
    # the checkpoint's run, but for its micro-batch 2
    llama3 = ["--model", "tiny-llama3", "--seq-len", "64", "--data", CHAT_DATA, "--val-split", "0.05"]
    resume = run + llama3 + ["--micro-batch-size", "2"]
    return {
        # checkpoints and resume
        "resume with no checkpoint": (run + ["--resume"], "no finished checkpoint"),
        "resume from a missing folder": (run + ["--resume", tmp / "nope"], "no such checkpoint folder"),
        "resume elsewhere without a portable copy": (resume + ["--strategy", "zero3", "--resume", ck["native"]],
                                                     "without a portable copy"),
        "export without a portable copy": (["export", ck["native"], "--output", tmp / "hf"], "has no portable copy"),
        "resume onto another model shape": (run + ["--resume", ck["ddp"]], "another shape"),
        "resume from a corrupt meta.json": (resume + ["--resume", ck["corrupt"]], "meta.json is corrupt"),
        "resume from a checkpoint without state": (resume + ["--resume", ck["stateless"]], "has no state"),
        "resume with another micro-batch": (run + llama3 + ["--micro-batch-size", "4", "--resume", ck["ddp"]],
                                            "--micro-batch-size 2"),
        "resume with another world size": (["run", "--accelerator", "cpu", "--devices", "1", "--max-steps", "6", *llama3,
                                            "--micro-batch-size", "2", "--resume", ck["ddp"]], "use --grad-accum 2"),
        "resume without the checkpoint's validation split": (
            run + llama3[:-2] + ["--micro-batch-size", "2", "--resume", ck["ddp"]],
            "written with val_split 0.05 (the sequences of each step depend on it), this run has None; use --val-split 0.05"),
        "resume past max-steps": (run[:-2] + ["--max-steps", "2", *llama3, "--micro-batch-size", "2", "--resume", ck["ddp"]],
                                  "raise --max-steps"),
        "resume from a file, not a folder": (run + ["--resume", ck["ddp"] / "meta.json"], "no such checkpoint folder"),
        "negative checkpoint interval": (run + ["--checkpoint-every", "-1"], "--checkpoint-every"),
        "keep no checkpoints": (run + ["--keep-checkpoints", "0"], "--keep-checkpoints"),
        # plan
        "plan: gpu run with no gpus": (["plan", "--accelerator", "gpu", "--gpus", "0"], "--gpus 0"),
        "plan: negative gpu memory": (["plan", "--gpu-memory-gib", "-5"], "--gpu-memory-gib"),
        "plan: absurd gpu memory": (["plan", "--gpu-memory-gib", "100000"], "--gpu-memory-gib"),
        "plan: no cpu memory": (["plan", "--cpu-memory-gib", "0"], "--cpu-memory-gib"),
        "plan: unknown model config": (["plan", "--model", "llama-999b"], "--model llama-999b"),
        "weights that disagree with the config": (run + ["--model", tmp / "mismatched"],
                                                  "is [64, 32] in the weights but the config.json says [96, 32]"),
        "plan: not a llama config.json": (["plan", "--model", tmp / "gpt2.json"], "model_type is 'gpt2'"),
        "plan: llama config.json without its shape": (["plan", "--model", tmp / "shapeless.json"],
                                                      "lacks hidden_size, num_hidden_layers"),
        "plan: a text file as the model": (["plan", "--model", tmp / "notes.txt"], "is a file, not a model folder"),
        "plan: nothing fits": (["plan", "--model", "llama-70b", "--accelerator", "gpu", "--gpus", "1", "--gpu-memory-gib",
                                "16", "--cpu-memory-gib", "64", "--seq-len", "2048"], "no strategy fits"),
        # compare
        "compare: one strategy": (["compare", "--strategies", "ddp"], "two or more different presets"),
        "compare: an unknown strategy": (["compare", "--strategies", "ddp,nope"], "unknown strategy"),
        "compare: the same strategy twice": (["compare", "--strategies", "ddp,ddp"], "two or more different presets"),
        # launch
        "launch: node rank out of range": (["launch", "--num-nodes", "2", "--node-rank", "2", "--devices", "2",
                                            "--master-port", "29500", "--master-addr", "x"], "--node-rank 2"),
        "launch: no port": (["launch", "--devices", "2", "--node-rank", "0"], "--master-port"),
        # configs
        "export-config: unknown format": (["export-config", "--format", "yaml"], "--format"),
        "deepspeed config without a stage": (run + ["--deepspeed-config", tmp / "nostage.json"], "no zero_optimization.stage"),
        "deepspeed scheduler with no equivalent": (run + ["--deepspeed-config", tmp / "onecycle.json"],
                                                   "scheduler OneCycle has no shardlab equivalent"),
        "global batch that does not divide": (run + ["--global-batch-size", "7"], "not a multiple of micro-batch 4 x 2 rank(s)"),
        "global batch against the accumulation": (run + ["--global-batch-size", "16", "--grad-accum", "3"],
                                                  "--grad-accum 3 contradicts --global-batch-size 16"),
        "plan: micro-batch auto when nothing fits": (["plan", "--model", "llama-70b", "--strategy", "zero3", "--accelerator", "gpu",
                                                      "--gpus", "1", "--gpu-memory-gib", "16", "--micro-batch-size", "auto"],
                                                     "not even micro-batch 1 fits with zero3"),
        "deepspeed config missing": (run + ["--strategy", "zero3", "--deepspeed-config", tmp / "nope.json"], "no such file"),
        "deepspeed config not json": (run + ["--strategy", "zero3", "--deepspeed-config", tmp / "ds.json"], "--deepspeed-config"),
        "gradient accumulation 0": (run + ["--grad-accum", "0"], "--grad-accum"),
        "unknown lr schedule": (run + ["--lr-schedule", "wavy"], "--lr-schedule"),
        "warm-up longer than training": (run + ["--warmup-steps", "100"], "--warmup-steps 100"),
    }


def test_bad_inputs_across_commands(checkpoints, cache_dir, tmp_path, capsys, monkeypatch):
    """With test_bad_run_inputs: the bad input of run, plan, compare, launch, configs and checkpoints.

    The `recipe` entry point is called in this process (cli.main: what `recipe` runs, exit code as its
    return value): the same checks as a fresh process, without 28 interpreter start-ups."""
    from shardlab.recipes import cli

    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    failures = []
    for name, (args, expected) in _across_commands(tmp_path, checkpoints).items():
        out = tmp_path / ("out-" + name.replace(" ", "-").replace(":", ""))
        has_output = args[0] in ("run", "compare", "export-config")
        rc = cli.main([str(a) for a in args] + (["--output", str(out)] if has_output else []))
        err = capsys.readouterr().err
        lines = [l for l in err.splitlines() if l.startswith("recipe: error:")]
        if not (rc == 2 and len(lines) == 1 and expected in lines[0] and "Traceback" not in err and not out.exists()):
            failures.append(f"{name}: rc={rc} stderr={err[-400:]!r}")
    assert not failures, "\n".join(failures)
    # the checkpoints a failed resume pointed at are untouched
    from shardlab.recipes.checkpoint import problem

    assert sorted(p.name for p in checkpoints["ddp"].iterdir()) == ["meta.json", "portable", "rng-rank0.pt",
                                                                    "rng-rank1.pt", "state"]
    assert problem(checkpoints["ddp"]) is None and problem(checkpoints["native"]) is None
