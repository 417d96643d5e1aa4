"""The step profile (SHARDLAB_PROFILE, benchmarks/hf_peer.py --profile): the window it covers and its summary,
in-process on CPU (the GPU kernel tables are exercised on the GPU machine; see benchmarks/results)."""
import torch

from shardlab.recipes.profile import StepWindow, idle_gaps, kind


def test_kernel_kinds():
    table = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matmul",
        "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_TNT": "matmul",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>": "attention",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop": "attention",
        "_rms_norm_forward_kernel": "triton (Liger, compile)",
        "triton_poi_fused_add_mul_0": "triton (Liger, compile)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...FusedAdamMathFunctor...>": "optimizer",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<2>, at::native::(anonymous namespace)::CopyFunctor<c10::BFloat16, float, 2, 1, 1>>": "copies",
        "ncclDevKernel_AllGather_RING_LL": "communication",
        "Memcpy DtoD (Device -> Device)": "copies",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>": "elementwise",
        "void at::native::reduce_kernel<512, 1, ...>": "reduction",
        "something_new": "other",
    }
    assert {name: kind(name) for name in table} == table


def test_window_profiles_only_its_steps_and_writes_a_summary(tmp_path):
    path = tmp_path / "profile.txt"
    window = StepWindow(str(path), start=2, steps=2)
    a = torch.randn(64, 64)
    for done in range(6):
        window.step_begin(done)
        a = torch.tanh(a @ a)
        window.step_end(done + 1)
        assert path.exists() == (done + 1 >= 4)
    text = path.read_text()
    assert text.startswith("steps profiled: 2;")
    assert "aten::mm" in text and "top 25 host ops" in text
    assert not list(tmp_path.glob("*.tmp"))


def test_training_that_ends_inside_or_before_the_window_closes_it_and_says_so(tmp_path):
    """max-steps below the window's end: training's end closes the profiler (left running to the interpreter's exit, it
    aborted the process on the GPU machine) and summarises the steps it covered; before the window, one line says why."""
    inside, before, whole = tmp_path / "inside.txt", tmp_path / "before.txt", tmp_path / "whole.txt"
    window, a = StepWindow(str(inside), start=2, steps=2), torch.randn(64, 64)
    for done in range(3):
        window.step_begin(done)
        a = torch.tanh(a @ a)
        window.step_end(done + 1)
    assert not inside.exists() and torch._C._autograd._profiler_enabled()
    window.finish(3)
    assert not torch._C._autograd._profiler_enabled()
    assert inside.read_text().startswith("training ended after 3 optimizer steps, inside the window 2..3\nsteps profiled: 1;")
    StepWindow(str(before), start=6, steps=3).finish(4)
    assert before.read_text() == ("nothing profiled: training ended after 4 optimizer steps, before the window 6..8; "
                                  "run at least 9 steps\n")
    window = StepWindow(str(whole), start=0, steps=1)
    window.step_begin(0)
    window.step_end(1)
    text = whole.read_text()
    window.finish(5)  # a window already written stays as it is
    assert whole.read_text() == text and text.startswith("steps profiled: 1;") and not list(tmp_path.glob("*.tmp"))


def test_with_python_the_summary_names_the_python_functions_apart(tmp_path):
    def busy(a):  # its own host time: a Python loop
        return sum(range(20_000)) + float(torch.tanh(a).sum())

    path = tmp_path / "profile.txt"
    window = StepWindow(str(path), start=0, steps=2, python=True)
    for done in range(2):
        window.step_begin(done)
        busy(torch.randn(64, 64))
        window.step_end(done + 1)
    text = path.read_text()
    ops, python = text.split("top 25 Python functions by self CPU time")
    assert "aten::tanh" in ops.split("top 25 host ops")[1] and "busy" not in ops
    assert "test_profile.py(" in python and ": busy" in python and "aten::" not in python


def test_idle_gaps_merge_streams_and_name_the_host_op_running():
    kernels = [(0, 10, "gemm"), (5, 20, "copy"), (30, 35, "adam"), (135, 140, "embedding"), (138, 150, "gemm")]
    host = [(0, 200, "run"), (33, 140, "cudaStreamSynchronize"), (31, 34, "aten::item")]
    lines = idle_gaps(kernels, host, steps=1, top=2)
    assert lines[0].startswith("device idle between kernels: 0.11 ms a step in 2 gaps")
    assert lines[2].split() == ["0.10", "adam", "->", "embedding", "(cudaStreamSynchronize)"]
    assert lines[3].split() == ["0.01", "copy", "->", "adam", "(run)"]  # 10 us
    by_op = lines[lines.index("device idle by the host op running as each gap began") + 2:]
    assert [line.split() for line in by_op] == [["0.10", "1", "cudaStreamSynchronize"], ["0.01", "1", "run"]]
    assert idle_gaps([], host, steps=1) == ["device idle: no device kernels profiled"]


def test_a_run_that_stops_inside_the_window_writes_the_profile_and_exits_cleanly(recipe, tmp_path):
    """A real `recipe run` of 7 steps under SHARDLAB_PROFILE (window 6..8): Lightning's train end closes the profiler."""
    path = tmp_path / "profile.txt"
    proc = recipe("run", "--strategy", "ddp", "--accelerator", "cpu", "--devices", "1", "--max-steps", "7", "--no-export",
                  "--output", str(tmp_path / "run"), env={"SHARDLAB_PROFILE": str(path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert path.read_text().startswith("training ended after 7 optimizer steps, inside the window 6..8\nsteps profiled: 1;")
