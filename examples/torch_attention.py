#!/usr/bin/env python3
"""A DiT attention block whose attention is torch.ops.xstage.attention instead of
F.scaled_dot_product_attention: checks the two against each other, times both, and with
torch >= 2 on a GPU runs torch.compile of the block with our operator inside.

    PYTHONPATH=<build>/python python3 examples/torch_attention.py              # GPU if there is one
    PYTHONPATH=<build>/python python3 examples/torch_attention.py --device cpu # tiny check only

--json FILE writes the rows (per S: max error, median times) for scripts/device.d/torch.sh.
Exits non-zero when an output is off by more than the bf16 tolerance or compile fails.
"""

import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

import xstage


def sdpa(q, k, v, causal):
    """PyTorch's attention on [B, S, H, D]; torch 1.x has no SDPA: fp32 math there."""
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
    s = qt.float() @ kt.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (s.softmax(-1) @ vt.float()).to(q.dtype).transpose(1, 2)


class DiTAttention(torch.nn.Module):
    """x [B, S, C] -> QKV projection, RMS-normed q and k, attention over heads, output projection."""

    def __init__(self, dim, heads, backend):
        super().__init__()
        self.heads, self.backend = heads, backend
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.q_scale = torch.nn.Parameter(torch.ones(dim // heads))
        self.k_scale = torch.nn.Parameter(torch.ones(dim // heads))

    @staticmethod
    def rms(t, w):
        return (t.float() * torch.rsqrt(t.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(t.dtype) * w.to(t.dtype)

    def forward(self, x):
        b, s, c = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, c // self.heads).unbind(2)  # strided, D contiguous
        q, k = self.rms(q, self.q_scale), self.rms(k, self.k_scale)
        if self.backend == "xstage":
            o = torch.ops.xstage.attention(q, k, v, False, None)[0]
        else:
            o = sdpa(q, k, v, False)
        return self.proj(o.reshape(b, s, c))


def medians_ms(fns, warmup, reps, device, warmup_ms=0.0):
    """Median per-call time of each function, sampled in turns (f0, f1, f0, f1, ...) so that
    clock and power drift during the run falls on all of them alike: CUDA events on the GPU,
    wall clock on the CPU. warmup_ms: keep calling them (in turns) for that long first, so
    the samples see the clock the card settles at under this load."""
    import time
    for fn in fns:
        for _ in range(warmup):
            fn()
    t_end = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < t_end:
        for fn in fns:
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, t in zip(fns, times):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                t.append(start.elapsed_time(end))
            else:
                import time
                t0 = time.perf_counter()
                fn()
                t.append(1e3 * (time.perf_counter() - t0))
    return [statistics.median(t) for t in times]


def max_rel_error(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6)).item()


def run_row(seq, args, device, blocks):
    """One sequence length: the operator against SDPA on the same q, k, v, then both blocks."""
    g = torch.Generator(device="cpu").manual_seed(seq)
    shape = (args.batch, seq, args.heads, args.head_dim)
    q, k, v = (torch.randn(shape, generator=g).to(device, torch.bfloat16) for _ in range(3))
    row = {"S": seq, "B": args.batch, "heads": args.heads, "D": args.head_dim, "causal": args.causal}
    ours = torch.ops.xstage.attention(q, k, v, args.causal, None)[0]
    row["attn_rel_err"] = max_rel_error(ours, sdpa(q, k, v, args.causal))
    x = torch.randn((args.batch, seq, args.heads * args.head_dim), generator=g).to(device, torch.bfloat16)
    flops = 4 * seq * seq * args.head_dim * args.heads * args.batch / (2 if args.causal else 1)
    if args.op_only:
        if device.type == "cuda" and not args.no_timing:
            row["op_ms"] = medians_ms([lambda: torch.ops.xstage.attention(q, k, v, args.causal, None)], args.warmup,
                                      args.reps, device, args.warmup_ms)[0]
            row["op_tflops"] = flops / row["op_ms"] / 1e9
        return row
    with torch.no_grad():
        row["block_rel_err"] = max_rel_error(blocks["xstage"](x), blocks["sdpa"](x))
        if device.type == "cuda" and not args.no_timing:
            row["op_ms"], row["sdpa_ms"] = medians_ms([lambda: torch.ops.xstage.attention(q, k, v, args.causal, None),
                                                       lambda: sdpa(q, k, v, args.causal)], args.warmup, args.reps,
                                                      device)
            row["block_ms"], row["block_sdpa_ms"] = medians_ms([lambda: blocks["xstage"](x), lambda: blocks["sdpa"](x)],
                                                               args.warmup, args.reps, device)
        if "compiled" in blocks:
            row["compiled_rel_err"] = max_rel_error(blocks["compiled"](x), blocks["xstage"](x))
            if device.type == "cuda" and not args.no_timing:
                row["compiled_ms"] = medians_ms([lambda: blocks["compiled"](x)], args.warmup, args.reps, device)[0]
    if "op_ms" in row:
        row["op_tflops"] = flops / row["op_ms"] / 1e9
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--seq", default=None, help="sequence lengths, comma-separated (default GPU 4096,16384,32768; "
                                                "CPU 64)")
    ap.add_argument("--heads", type=int, default=None, help="default GPU 24, CPU 2")
    ap.add_argument("--head-dim", type=int, default=128, choices=[64, 128])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--causal", action="store_true", help="causal attention in the operator comparison")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup-ms", type=float, default=0.0,
                    help="before the samples, call the timed functions for this long (steady clocks)")
    ap.add_argument("--op-only", action="store_true",
                    help="check and time the operator alone (no blocks, no SDPA timing, no compile): the "
                         "operator's side of a comparison with `xstage bench attention` in the same conditions")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--tolerance", type=float, default=2e-2, help="max relative error against SDPA (bf16)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    on_gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if on_gpu else "cpu")
    seqs = [int(s) for s in (args.seq or ("4096,16384,32768" if on_gpu else "64")).split(",")]
    args.heads = args.heads or (24 if on_gpu else 2)
    dim = args.heads * args.head_dim

    torch.manual_seed(0)
    blocks = {"xstage": DiTAttention(dim, args.heads, "xstage").to(device, torch.bfloat16).eval()}
    blocks["sdpa"] = DiTAttention(dim, args.heads, "sdpa").to(device, torch.bfloat16).eval()
    blocks["sdpa"].load_state_dict(blocks["xstage"].state_dict())
    compile_note = "skipped (--no-compile)" if args.no_compile else "skipped (needs torch >= 2 on a GPU)"
    if on_gpu and hasattr(torch, "compile") and not args.no_compile and not args.op_only:
        blocks["compiled"] = torch.compile(blocks["xstage"], fullgraph=True)
        compile_note = "ok"

    info = xstage.build_info()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if on_gpu else 'cpu'}; xstage library: "
          f"LibTorch {info['torch_built_against']}, CUDA kernels {info['cuda_kernels']}")
    rows, failed = [], []
    for seq in seqs:
        try:
            row = run_row(seq, args, device, blocks)
        except Exception as e:  # a compile failure is a result: report it and go on
            if "compiled" not in blocks:
                raise
            compile_note = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            del blocks["compiled"]
            row = run_row(seq, args, device, blocks)
        rows.append(row)
        for key in ("attn_rel_err", "block_rel_err", "compiled_rel_err"):
            if row.get(key, 0) > args.tolerance:
                failed.append(f"S={seq}: {key} {row[key]:.3g} > {args.tolerance}")

    print(f"{'S':>7} {'attn err':>9} {'block err':>9} {'op ms':>8} {'SDPA ms':>8} {'op/SDPA':>8} {'TFLOP/s':>8} "
          f"{'block ms':>9} {'SDPA blk':>9} {'compiled':>9}")
    for r in rows:
        t = lambda k: f"{r[k]:.3f}" if k in r else "-"
        ratio = f"{r['sdpa_ms'] / r['op_ms']:.2f}x" if "op_ms" in r and "sdpa_ms" in r else "-"
        tf = f"{r['op_tflops']:.0f}" if "op_tflops" in r else "-"
        block_err = f"{r['block_rel_err']:.2e}" if "block_rel_err" in r else "-"
        print(f"{r['S']:>7} {r['attn_rel_err']:>9.2e} {block_err:>9} {t('op_ms'):>8} {t('sdpa_ms'):>8} "
              f"{ratio:>8} {tf:>8} {t('block_ms'):>9} {t('block_sdpa_ms'):>9} {t('compiled_ms'):>9}")
    print(f"torch.compile of the block with xstage.attention inside: {compile_note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": str(device), "compile": compile_note, "rows": rows}, f,
                      indent=1)
    if failed or compile_note.startswith("FAILED"):
        print("FAILED: " + "; ".join(failed + ([compile_note] if compile_note.startswith("FAILED") else [])))
        return 1
    print("ok: xstage.attention matches SDPA within", args.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main())
