"""Matrix products for training through oneDNN's dnnl_sgemm (ctypes), with autograd.

Debian's python3-torch 1.13 is built against the reference (netlib) BLAS: torch.mm runs at
about 1 GFLOP/s on one thread here, while the oneDNN library that the same torch links
(libdnnl.so.2) has a row-major sgemm at about 15 GFLOP/s.  `linear` and `matmul` below call
it and fall back to torch when the library is missing (or FATHOM_TRAIN_TORCH_MM=1), so the
results are the same math either way (f32 GEMM; the summation order differs, ~1e-6 relative).
"""
import ctypes
import os

import torch

_lib = None
if os.environ.get("FATHOM_TRAIN_TORCH_MM") != "1":
    for name in ("libdnnl.so.2", "libdnnl.so"):
        try:
            _lib = ctypes.CDLL(name)
            break
        except OSError:
            pass
if _lib is not None:
    _sgemm = _lib.dnnl_sgemm
    _sgemm.restype = ctypes.c_int
    _sgemm.argtypes = [ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_float, ctypes.c_void_p, ctypes.c_int64]

AVAILABLE = _lib is not None


def mm(a, b, ta=False, tb=False):
    """op(a) @ op(b) for 2-D float32 tensors, op = transpose when ta / tb."""
    if _lib is None or a.dtype != torch.float32 or b.dtype != torch.float32:
        return (a.t() if ta else a) @ (b.t() if tb else b)
    a, b = a.contiguous(), b.contiguous()
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    K2, N = (b.shape[1], b.shape[0]) if tb else b.shape
    if K != K2:
        raise ValueError(f"mm: inner sizes {K} and {K2} differ")
    c = torch.empty(M, N, dtype=torch.float32)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()
    rc = _sgemm(b"T" if ta else b"N", b"T" if tb else b"N", M, N, K, 1.0, a.data_ptr(), a.shape[1],
                b.data_ptr(), b.shape[1], 0.0, c.data_ptr(), N)
    if rc != 0:
        raise RuntimeError(f"dnnl_sgemm returned status {rc}")
    return c


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):  # x [M, K], w [N, K] -> [M, N]
        ctx.save_for_backward(x, w)
        return mm(x, w, tb=True)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx = mm(dy, w) if ctx.needs_input_grad[0] else None
        dw = mm(dy, x, ta=True) if ctx.needs_input_grad[1] else None
        return dx, dw


def linear(x, w, b=None):
    if _lib is None:
        return torch.nn.functional.linear(x, w, b)
    shape = x.shape
    y = _Linear.apply(x.reshape(-1, shape[-1]), w).view(*shape[:-1], w.shape[0])
    return y if b is None else y + b


def _bmm(a, b, ta=False, tb=False):
    return torch.stack([mm(a[i], b[i], ta, tb) for i in range(a.shape[0])])


class _BMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):  # [n, M, K] @ [n, K, N]
        ctx.save_for_backward(a, b)
        return _bmm(a, b)

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        da = _bmm(dc, b, tb=True) if ctx.needs_input_grad[0] else None
        db = _bmm(a, dc, ta=True) if ctx.needs_input_grad[1] else None
        return da, db


def matmul(a, b):
    """a [..., M, K] @ b [..., K, N] with equal leading dims."""
    if _lib is None:
        return a @ b
    lead = a.shape[:-2]
    c = _BMM.apply(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return c.view(*lead, *c.shape[-2:])
