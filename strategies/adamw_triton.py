"""The Triton kernel of strategies/adamw_kernel.py (imported there only on a GPU: CUDA builds of torch bring triton).

`adamw`: one program a block of one tensor. Whole blocks load and store unmasked, so that each thread moves 16 bytes at
a time (the weights, moments and gradients come from torch's allocator, aligned to 16 bytes, which
adamw_kernel.requirements checks); the last block of a tensor is masked.
"""
import triton
import triton.language as tl


@triton.jit
def _update(p_ptr, g_ptr, m_ptr, v_ptr, scale_ptr, offsets, mask, beta1, beta2, eps, decay, step_size, bias2_sqrt,
            HAS_SCALE: tl.constexpr, MASKED: tl.constexpr):
    if MASKED:
        g = tl.load(g_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
        m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
        v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    else:
        g = tl.load(g_ptr + offsets).to(tl.float32)
        p = tl.load(p_ptr + offsets)
        m = tl.load(m_ptr + offsets)
        v = tl.load(v_ptr + offsets)
    if HAS_SCALE:
        g = g / tl.load(scale_ptr)
    p = p - decay * p  # decoupled weight decay (decay: lr x weight_decay)
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    p = p - step_size * m / (tl.sqrt(v) / bias2_sqrt + eps)
    if MASKED:
        tl.store(p_ptr + offsets, p, mask=mask)
        tl.store(m_ptr + offsets, m, mask=mask)
        tl.store(v_ptr + offsets, v, mask=mask)
    else:
        tl.store(p_ptr + offsets, p)
        tl.store(m_ptr + offsets, m)
        tl.store(v_ptr + offsets, v)

@triton.jit
def adamw(rows_ptr, grads_ptr, first_ptr, count, scale_ptr, found_ptr, beta1, beta2, eps, decay, step_size,
          bias2_sqrt, G: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_FOUND: tl.constexpr, BLOCK: tl.constexpr,
          SEARCH: tl.constexpr):
    if HAS_FOUND:  # GradScaler's found_inf: where set, nothing is stepped
        if tl.load(found_ptr) != 0.0:
            return
    program = tl.program_id(0).to(tl.int64)
    # the tensor t with first[t] <= program < first[t + 1], keeping first[lo] <= program < first[hi]
    lo = tl.zeros((), tl.int64)
    hi = lo + count
    for _ in tl.static_range(SEARCH):
        mid = (lo + hi) // 2
        right = tl.load(first_ptr + mid) <= program
        lo = tl.where(right, mid, lo)
        hi = tl.where(right, hi, mid)
    t = lo
    start = (program - tl.load(first_ptr + t)) * BLOCK
    offsets = tl.max_contiguous(tl.multiple_of(start + tl.arange(0, BLOCK), BLOCK), BLOCK)
    n = tl.load(rows_ptr + 4 * t + 3)
    p_ptr = tl.multiple_of(tl.load(rows_ptr + 4 * t).to(tl.pointer_type(tl.float32)), 16)
    m_ptr = tl.multiple_of(tl.load(rows_ptr + 4 * t + 1).to(tl.pointer_type(tl.float32)), 16)
    v_ptr = tl.multiple_of(tl.load(rows_ptr + 4 * t + 2).to(tl.pointer_type(tl.float32)), 16)
    g_address = tl.load(grads_ptr + t)
    if G == 1:
        g_ptr = tl.multiple_of(g_address.to(tl.pointer_type(tl.bfloat16)), 16)
    elif G == 2:
        g_ptr = tl.multiple_of(g_address.to(tl.pointer_type(tl.float16)), 16)
    else:
        g_ptr = tl.multiple_of(g_address.to(tl.pointer_type(tl.float32)), 16)
    if start + BLOCK <= n:  # a whole block: unmasked, so that each thread reads 16 bytes at a time
        _update(p_ptr, g_ptr, m_ptr, v_ptr, scale_ptr, offsets, offsets >= 0, beta1, beta2, eps, decay, step_size,
                bias2_sqrt, HAS_SCALE, False)
    else:
        _update(p_ptr, g_ptr, m_ptr, v_ptr, scale_ptr, offsets, offsets < n, beta1, beta2, eps, decay, step_size,
                bias2_sqrt, HAS_SCALE, True)
