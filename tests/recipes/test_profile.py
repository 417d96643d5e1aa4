"""The step profile (SHARDLAB_PROFILE, benchmarks/hf_peer.py --profile): the window it covers and its summary,
in-process on CPU (the GPU kernel tables are exercised on the GPU machine; see benchmarks/results)."""
import torch

from shardlab.recipes.profile import StepWindow, kind


def test_kernel_kinds():
    table = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matmul",
        "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_TNT": "matmul",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>": "attention",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop": "attention",
        "_rms_norm_forward_kernel": "triton (Liger, compile)",
        "triton_poi_fused_add_mul_0": "triton (Liger, compile)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...FusedAdamMathFunctor...>": "optimizer",
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
