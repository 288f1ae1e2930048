"""xstage from PyTorch: thin wrappers over the operators of libxstage_torch.so.

    import torch, xstage
    out = xstage.attention(q, k, v)            # [B, S, H, D] bf16, as torch.ops.xstage.attention

Every function here calls one operator of torch.ops.xstage (registered by the C++
library when this package loads it), so models may also call torch.ops.xstage.* directly,
e.g. inside torch.compile. The library is looked for, in order: $XSTAGE_TORCH_LIB; beside
this file (the build tree: PYTHONPATH=<build>/python); where `cmake --install` put it
(_libpath.py, written at install). docs/xstage-torch.md has the operators' contracts.
The gait system's bindings are the submodule xstage.gait (`import xstage.gait`), where the
library was built with them (build_info()["gait"]).
"""

import json
import os
from pathlib import Path

import torch

__all__ = ["attention", "moe_forward", "moe_grouped", "moe_route", "burstgap_predict", "advise", "build_info",
           "library_path"]

_LIB_NAME = "libxstage_torch.so"


def _find_library():
    env = os.environ.get("XSTAGE_TORCH_LIB")
    if env:
        if not Path(env).is_file():
            raise ImportError(f"xstage: XSTAGE_TORCH_LIB={env} is not a file")
        return str(Path(env).resolve())
    here = Path(__file__).resolve().parent
    candidates = [here / _LIB_NAME]
    try:
        from ._libpath import LIB_RELATIVE  # written by `cmake --install`
        candidates.append((here / LIB_RELATIVE).resolve())
    except ImportError:
        pass
    for path in candidates:
        if path.is_file():
            return str(path)
    looked = ", ".join(str(p) for p in candidates)
    raise ImportError(f"xstage: {_LIB_NAME} not found (looked at {looked}); build it (LibTorch found at configure "
                      "time) and use PYTHONPATH=<build>/python, install it, or set XSTAGE_TORCH_LIB")


library_path = _find_library()
torch.ops.load_library(library_path)
_ops = torch.ops.xstage


def attention(q, k, v, causal=False, scale=None, return_lse=False):
    """softmax(q kᵀ · scale) v for q [B, Sq, H, D], k and v [B, Skv, H, D], all bf16 on one
    device, D in {64, 128}, last dimension contiguous. scale defaults to 1/sqrt(D); causal
    masking is bottom-right aligned. Returns out [B, Sq, H, D] bf16, and with return_lse
    also lse [B, H, Sq] fp32 (natural log). Hopper (sm_90): the xstage kernel on the current
    stream; CPU and other GPUs: a reference."""
    out, lse = _ops.attention(q, k, v, causal, scale)
    return (out, lse) if return_lse else out


def moe_forward(x, router_logits, w1, w2, topk):
    """The MoE layer at expert parallelism 1: top-k softmax routing of router_logits [T, E]
    fp32, then per chosen expert SwiGLU(x W1_gateᵀ, x W1_upᵀ) W2ᵀ, summed with the routing
    weights. x [T, hidden] bf16, w1 [E, 2I, hidden] bf16 (gate rows, then up rows),
    w2 [E, hidden, I] bf16; hidden a multiple of 256, I of 128. Returns [T, hidden] bf16."""
    return _ops.moe_forward(x, router_logits, w1, w2, int(topk))


def moe_grouped(rows, counts, w1, w2):
    """The experts alone, on rows a caller has already dispatched (e.g. after its own
    all-to-all): rows [R, hidden] bf16 grouped by expert, counts[e] rows for expert e
    (a list or a tensor, summing to R). Returns each row's expert output [R, hidden] bf16.
    On the GPU this waits for the current stream before it launches (the layout is built
    on the host)."""
    if isinstance(counts, torch.Tensor):
        counts = counts.tolist()
    return _ops.moe_grouped(rows, [int(c) for c in counts], w1, w2)


def moe_route(router_logits, topk):
    """The routing moe_forward uses (CPU): (expert [T, k] int32, weight [T, k] fp32), the
    softmax over all experts renormalised over the top k; ties go to the lower expert id."""
    return _ops.moe_route(router_logits, int(topk))


def _params_arg(params):
    """The operators' params string: '' (shipped fits, found from the source tree), JSON
    text, or a path. Installed, the shipped fits live beside this file."""
    if params is None:
        shipped = Path(__file__).resolve().parent / "data"
        files = [shipped / "h200_params.json", shipped / "h200x4_params.json"]
        if not files[0].is_file():
            return ""
        merged = json.loads(files[0].read_text())
        if files[1].is_file():
            merged["groups"] += json.loads(files[1].read_text())["groups"]
        return json.dumps(merged)
    if isinstance(params, dict):
        return json.dumps(params)
    return os.fspath(params)


def burstgap_predict(sms, burst_bytes, gap_ns, bursts=48, pattern="peer", store="st16", gpus=2, params=None):
    """The Burst-Gap model's prediction for `bursts` bursts of burst_bytes per SM from
    `sms` SMs, gap_ns apart (a dict: per-burst issue times, steady state, min gap, advice).
    params: None for the shipped H200 fits, a dict, JSON text or a path."""
    text = _ops.burstgap_predict(_params_arg(params), int(sms), float(burst_bytes), float(gap_ns), int(bursts),
                                 pattern, store, int(gpus))
    return json.loads(text)


def advise(bytes_per_burst, sms, compute_ns_between_bursts, bursts=1, pattern="peer", store="st16", gpus=2,
           params=None):
    """The advisor the fused kernels ask: predicted stall of a burst profile and the remedy
    (none, lengthen_gap, split_burst, spread_over_more_sms) with its numbers, as a dict."""
    text = _ops.advise(_params_arg(params), int(bytes_per_burst), int(sms), float(compute_ns_between_bursts),
                       int(bursts), pattern, store, int(gpus))
    return json.loads(text)


def build_info():
    """What the loaded library was built with: LibTorch version, whether the CUDA kernels and
    the gait bindings (xstage.gait) are in."""
    return json.loads(_ops.build_info())
