"""torch.ops.xstage.* against references written here in PyTorch float64 (no xstage code),
and the argument errors. The device is $XSTAGE_TEST_DEVICE (cpu by default; cuda runs the
same checks on the GPU paths). Run: PYTHONPATH=<build>/python python3 -m unittest discover
-s python/tests."""

import math
import os
import unittest

import torch

import xstage

DEVICE = torch.device(os.environ.get("XSTAGE_TEST_DEVICE", "cpu"))
ON_GPU = DEVICE.type == "cuda"


def bf16(t):
    """Round float64 values to bf16 and back (the points where the kernels store bf16)."""
    return t.to(torch.bfloat16).to(torch.float64)


def randn_bf16(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16).to(DEVICE)


# ------------------------------------------------------------------------------ attention

def attention_reference(q, k, v, causal, scale):
    """float64 softmax(q kᵀ scale) v, bottom-right causal; rows without keys: 0 and -inf."""
    q, k, v = (t.cpu().double() for t in (q, k, v))
    sq, skv = q.shape[1], k.shape[1]
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        i = torch.arange(sq).unsqueeze(1)
        j = torch.arange(skv).unsqueeze(0)
        s = s.masked_fill(j > i + (skv - sq), float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v), lse


class AttentionTest(unittest.TestCase):
    def check(self, b, sq, skv, h, d, causal, scale=None, strided=False):
        if strided:  # q, k, v as views of one packed [B, S, 3, H, D] tensor (a QKV projection)
            qkv = randn_bf16(b, sq, 3, h, d, seed=1)
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        else:
            q, k, v = randn_bf16(b, sq, h, d, seed=1), randn_bf16(b, skv, h, d, seed=2), randn_bf16(b, skv, h, d, seed=3)
        out, lse = xstage.attention(q, k, v, causal=causal, scale=scale, return_lse=True)
        want, want_lse = attention_reference(q, k, v, causal, scale if scale else 1 / math.sqrt(d))
        self.assertEqual(tuple(out.shape), (b, sq, h, d))
        self.assertEqual(out.dtype, torch.bfloat16)
        self.assertEqual(tuple(lse.shape), (b, h, sq))
        self.assertEqual(lse.dtype, torch.float32)
        self.assertEqual(out.device.type, DEVICE.type)
        # bf16 output: one rounding on the CPU (fp64 reference), a few in the GPU kernel.
        tol = 2e-2 if ON_GPU else 8e-3
        err = (out.cpu().double() - want).abs().max().item()
        self.assertLessEqual(err, tol * max(1.0, want.abs().max().item()), f"out differs by {err}")
        finite = torch.isfinite(want_lse)
        self.assertTrue(torch.equal(torch.isfinite(lse.cpu()), finite), "lse is -inf exactly where no key is seen")
        lerr = (lse.cpu().double()[finite] - want_lse[finite]).abs().max().item()
        self.assertLessEqual(lerr, 1e-2 if ON_GPU else 1e-5, f"lse differs by {lerr}")
        return out, want

    def test_plain(self):
        self.check(2, 17, 17, 3, 64, causal=False)

    def test_causal_head_dim_128(self):
        self.check(1, 33, 33, 2, 128, causal=True)

    def test_causal_fewer_queries_than_keys(self):
        self.check(1, 9, 40, 2, 64, causal=True)

    def test_causal_rows_that_see_no_key(self):
        out, _ = self.check(1, 12, 5, 2, 64, causal=True)
        self.assertEqual(out[:, :7].abs().max().item(), 0.0)  # queries 0..6 see no key

    def test_explicit_scale(self):
        self.check(1, 8, 24, 2, 64, causal=False, scale=0.3)

    def test_strided_views_of_a_packed_qkv(self):
        self.check(2, 16, 16, 2, 64, causal=True, strided=True)

    def test_meta_gives_shapes_only(self):
        q = torch.empty(2, 7, 3, 64, dtype=torch.bfloat16, device="meta")
        k = torch.empty(2, 11, 3, 64, dtype=torch.bfloat16, device="meta")
        out, lse = torch.ops.xstage.attention(q, k, k)
        self.assertEqual((tuple(out.shape), tuple(lse.shape)), ((2, 7, 3, 64), (2, 3, 7)))
        self.assertEqual((out.device.type, lse.dtype), ("meta", torch.float32))

    def expect(self, exc, text, *args, **kwargs):
        with self.assertRaises(exc) as cm:
            xstage.attention(*args, **kwargs)
        self.assertIn(text, str(cm.exception))
        self.assertIn("xstage.attention", str(cm.exception))

    def test_bad_arguments_name_the_argument(self):
        q = randn_bf16(1, 8, 2, 64)
        self.expect(TypeError, "q must be bf16, got Float", q.float(), q, q)
        self.expect(TypeError, "v must be bf16, got Half", q, q, q.half())
        self.expect(ValueError, "k must be 4-D [B, S, H, D], got 3-D", q, q[0], q)
        self.expect(ValueError, "k has size 3 in dimension 2", q, randn_bf16(1, 8, 3, 64), q)
        self.expect(ValueError, "k has size 2 in dimension 0", q, randn_bf16(2, 8, 2, 64), q)
        self.expect(ValueError, "v has size 9 in dimension 1", q, q, randn_bf16(1, 9, 2, 64))
        self.expect(ValueError, "D = 32", randn_bf16(1, 8, 2, 32), randn_bf16(1, 8, 2, 32), randn_bf16(1, 8, 2, 32))
        noncontig = randn_bf16(1, 8, 2, 128)[..., ::2]
        self.expect(ValueError, "q must be contiguous in its last dimension", noncontig, q, q)
        self.expect(ValueError, "k must not be empty", q, randn_bf16(1, 0, 2, 64), randn_bf16(1, 0, 2, 64))
        self.expect(ValueError, "scale must be a finite positive number", q, q, q, scale=-1.0)
        if ON_GPU:
            self.expect(TypeError, "k is on cpu but q is on cuda", q, q.cpu(), q)


# ------------------------------------------------------------------------------ MoE

def route_reference(logits, topk):
    """Top-k of the softmax over all experts, renormalised over the k (descending)."""
    p = torch.softmax(logits.double(), -1)
    w, e = torch.topk(p, topk, dim=-1)
    return e, w / w.sum(-1, keepdim=True)


def expert_reference(x, w1, w2, e):
    """SwiGLU FFN of expert e on rows x, bf16 where the kernel stores bf16 (H, output)."""
    inter = w1.shape[1] // 2
    g = x @ w1[e, :inter].T
    u = x @ w1[e, inter:].T
    h = bf16(g * torch.sigmoid(g) * u)
    return bf16(h @ w2[e].T)


def moe_reference(x, logits, w1, w2, topk):
    x, w1, w2 = (t.cpu().double() for t in (x, w1, w2))
    experts, weights = route_reference(logits.cpu(), topk)
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(topk):
            out[t] += weights[t, j] * expert_reference(x[t:t + 1], w1, w2, int(experts[t, j]))[0]
    return bf16(out)


def moe_inputs(tokens=20, experts=8, hidden=256, inter=128, seed=0):
    x = randn_bf16(tokens, hidden, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    logits = torch.randn(tokens, experts, generator=g).to(DEVICE)
    w1 = randn_bf16(experts, 2 * inter, hidden, scale=0.06, seed=seed + 2)
    w2 = randn_bf16(experts, hidden, inter, scale=0.06, seed=seed + 3)
    return x, logits, w1, w2


class MoeTest(unittest.TestCase):
    def assert_close_bf16(self, got, want):
        got = got.cpu().double()
        # Sums in another order may flip a bf16 rounding: one unit in the last place (2^-7
        # relative), plus 1 % of the output's scale for the fp32 accumulation against the
        # fp64 reference, the bound of the fused kernel's own GPU test (moe_gpu_tests.cpp).
        bound = want.abs() * 2 ** -7 + 1e-2 * want.abs().max()
        bad = ((got - want).abs() > bound).sum().item()
        self.assertEqual(bad, 0, f"{bad} of {want.numel()} outputs off, max error {(got - want).abs().max():.3g}")

    def test_route_matches_softmax_topk(self):
        _, logits, _, _ = moe_inputs(tokens=50, experts=16)
        expert, weight = xstage.moe_route(logits.cpu(), 4)
        want_e, want_w = route_reference(logits.cpu(), 4)
        self.assertEqual((expert.dtype, weight.dtype), (torch.int32, torch.float32))
        self.assertTrue(torch.equal(expert.long(), want_e))
        self.assertLess((weight.double() - want_w).abs().max().item(), 1e-6)

    def test_forward_matches_reference(self):
        for topk in (1, 2, 3):
            x, logits, w1, w2 = moe_inputs(seed=topk)
            out = xstage.moe_forward(x, logits, w1, w2, topk)
            self.assertEqual((tuple(out.shape), out.dtype), ((20, 256), torch.bfloat16))
            self.assert_close_bf16(out, moe_reference(x, logits, w1, w2, topk))

    def test_grouped_matches_each_rows_expert(self):
        x, _, w1, w2 = moe_inputs(tokens=23, seed=5)
        counts = [4, 0, 7, 1, 0, 6, 5, 0]
        out = xstage.moe_grouped(x, counts, w1, w2)
        want, row = [], 0
        for e, c in enumerate(counts):
            want.append(expert_reference(x[row:row + c].cpu().double(), w1.cpu().double(), w2.cpu().double(), e))
            row += c
        self.assert_close_bf16(out, torch.cat(want))
        empty = xstage.moe_grouped(x[:0], [0] * 8, w1, w2)
        self.assertEqual(tuple(empty.shape), (0, 256))

    @unittest.skipUnless(ON_GPU, "the fused kernel against the CPU reference at a DiT-like shape: GPU only")
    def test_fused_kernel_matches_the_cpu_reference_at_a_larger_shape(self):
        x, logits, w1, w2 = moe_inputs(tokens=384, experts=16, hidden=1024, inter=512, seed=9)
        for topk in (2, 4):
            got = xstage.moe_forward(x, logits, w1, w2, topk)
            want = xstage.moe_forward(x.cpu(), logits.cpu(), w1.cpu(), w2.cpu(), topk)
            self.assert_close_bf16(got, want.double())
            again = xstage.moe_forward(x, logits, w1, w2, topk)  # the cached kernel instance, launched again
            self.assertTrue(torch.equal(got, again))
        counts = [40, 0, 31, 25, 0, 60, 8, 20, 50, 0, 30, 40, 20, 10, 30, 20]
        got = xstage.moe_grouped(x, counts, w1, w2)
        self.assert_close_bf16(got, xstage.moe_grouped(x.cpu(), counts, w1.cpu(), w2.cpu()).double())

    def test_meta_gives_shapes_only(self):
        x, logits, w1, w2 = (t.to("meta") for t in moe_inputs())
        self.assertEqual(tuple(torch.ops.xstage.moe_forward(x, logits, w1, w2, 2).shape), (20, 256))
        self.assertEqual(tuple(torch.ops.xstage.moe_grouped(x, [20] + [0] * 7, w1, w2).shape), (20, 256))

    def expect(self, fn, exc, text, *args):
        with self.assertRaises(exc) as cm:
            fn(*args)
        self.assertIn(text, str(cm.exception))

    def test_bad_arguments_name_the_argument(self):
        x, logits, w1, w2 = moe_inputs()
        f, g = xstage.moe_forward, xstage.moe_grouped
        self.expect(f, TypeError, "x must be bf16", x.float(), logits, w1, w2, 2)
        self.expect(f, TypeError, "router_logits must be float32", x, logits.double(), w1, w2, 2)
        self.expect(f, ValueError, "router_logits has size 19 in dimension 0", x, logits[:19], w1, w2, 2)
        self.expect(f, ValueError, "w1 must be 3-D [E, 2I, hidden]", x, logits, w1[0], w2, 2)
        self.expect(f, ValueError, "w2 has size 7 in dimension 0", x, logits, w1, w2[:7], 2)
        self.expect(f, ValueError, "w1 has 255 rows per expert", x, logits, w1[:, :255].contiguous(), w2, 2)
        self.expect(f, ValueError, "topk must be in 1..E = 8, got 9", x, logits, w1, w2, 9)
        self.expect(f, ValueError, "x must be contiguous", x.T.contiguous().T, logits, w1, w2, 2)
        small = randn_bf16(20, 128)
        self.expect(f, ValueError, "hidden (128) must be a positive multiple", small, logits,
                    randn_bf16(8, 256, 128), randn_bf16(8, 128, 128), 2)
        self.expect(g, ValueError, "counts sum to 19 but rows has 20 rows", x, [19] + [0] * 7, w1, w2)
        self.expect(g, ValueError, "counts has 7 entries but w1 has E = 8", x, [20] + [0] * 6, w1, w2)
        self.expect(g, ValueError, "counts[1] is negative", x, [21, -1] + [0] * 6, w1, w2)


# ------------------------------------------------------------------------------ Burst-Gap

GROUP = {"pattern": "peer", "store": "st16", "gpus": 2, "t0_ns_per_byte": 0.02, "issue_latency_ns": 150.0,
         "loop_overhead_ns": 0.0, "drain_GBps": 300.0, "drain_per_sm_GBps": 4.0, "capacity_bytes_gpu": 2.0e6,
         "capacity_bytes_per_sm": None, "capacity_scope": "gpu", "drain_bound": "fit", "capacity_bound": "fit",
         "sms_max": 132, "n_rows": 10, "fit_rel_error_median": 0.05}
PARAMS = {"version": 1, "source_csv": "test", "holdout_fraction": 0.0, "seed": 1, "target": "issue_ns_mean",
          "groups": [GROUP]}


def simulate(g, sms, burst, gap, bursts):
    """The fluid model of the X-Stage, burst by burst (docs/xstage-burstgap.md)."""
    t0, a0 = g["t0_ns_per_byte"], g["issue_latency_ns"]
    inject = sms / t0
    drain = min(g["drain_GBps"], sms * g["drain_per_sm_GBps"])
    cap = g["capacity_bytes_gpu"]
    q, issue = 0.0, []
    for _ in range(bursts):
        q = min(max(0.0, q - drain * a0), cap)
        tf = burst * t0
        t_fill = (cap - q) / (inject - drain) if inject > drain else math.inf
        if t_fill >= tf:
            t, q = tf, min(max(0.0, q + (inject - drain) * tf), cap)
        else:
            t, q = t_fill + (sms * burst - inject * t_fill) / drain, cap
        issue.append(a0 + t)
        q = max(0.0, q - drain * gap)
    return issue


class BurstGapTest(unittest.TestCase):
    def test_predict_matches_the_fluid_model(self):
        for sms, burst, gap in [(132, 16384, 1000.0), (132, 65536, 0.0), (8, 4096, 500.0), (66, 131072, 20000.0)]:
            p = xstage.burstgap_predict(sms, burst, gap, bursts=24, params=PARAMS)
            want = simulate(GROUP, sms, burst, gap, 24)
            got = [b["issue_ns"] for b in p["bursts"]]
            self.assertEqual(len(got), 24)
            for a, b in zip(got, want):
                self.assertAlmostEqual(a, b, delta=1e-6 * b)
            d = min(GROUP["drain_GBps"], sms * GROUP["drain_per_sm_GBps"])
            c = GROUP["capacity_bytes_gpu"]
            a0, tf = GROUP["issue_latency_ns"], burst * GROUP["t0_ns_per_byte"]
            steady = a0 + max(tf, sms * burst / d - min(gap + a0, c / d))
            self.assertAlmostEqual(p["steady_issue_ns"], steady, delta=1e-6 * steady)
            self.assertAlmostEqual(p["free_issue_ns"], a0 + tf, delta=1e-9 * tf)

    def test_advise_sums_the_stalls(self):
        a = xstage.advise(65536, 132, 1000.0, bursts=8, params=PARAMS)
        want = simulate(GROUP, 132, 65536, 1000.0, 8)
        free = GROUP["issue_latency_ns"] + 65536 * GROUP["t0_ns_per_byte"]
        self.assertAlmostEqual(a["predicted_stall_ns"], sum(w - free for w in want), delta=1e-3)
        self.assertIn(a["remedy"], ("lengthen_gap", "split_burst", "spread_over_more_sms"))
        self.assertTrue(a["reason"])
        calm = xstage.advise(1024, 4, 100000.0, bursts=4, params=PARAMS)
        self.assertEqual((calm["remedy"], calm["predicted_stall_ns"]), ("none", 0.0))

    def test_shipped_fits_load(self):
        p = xstage.burstgap_predict(132, 16384, 1000.0)
        self.assertEqual((p["params"]["pattern"], p["params"]["gpus"]), ("peer", 2))
        self.assertGreater(p["steady_issue_ns"], 0)

    def expect(self, fn, text, *args, **kwargs):
        with self.assertRaises(ValueError) as cm:
            fn(*args, **kwargs)
        self.assertIn(text, str(cm.exception))

    def test_bad_arguments_say_what(self):
        self.expect(xstage.burstgap_predict, "sms must be in 1..100000, got 0", 0, 16384, 0.0, params=PARAMS)
        self.expect(xstage.burstgap_predict, "the gap must be", 132, 16384, -1.0, params=PARAMS)
        self.expect(xstage.advise, "bursts must be in 1..100000", 16384, 132, 0.0, bursts=0, params=PARAMS)
        self.expect(xstage.advise, "tma", 16384, 132, 0.0, store="tma", params=PARAMS)
        bad = dict(PARAMS, groups=[dict(GROUP, drain_GBps="fast")])
        self.expect(xstage.burstgap_predict, "drain_GBps", 132, 16384, 0.0, params=bad)


@unittest.skipUnless(hasattr(torch, "compile") and ON_GPU, "torch.compile of the GPU paths: torch >= 2 on a GPU")
class CompileTest(unittest.TestCase):
    def test_compiled_function_calls_the_operators(self):
        x, logits, w1, w2 = moe_inputs()
        q = randn_bf16(1, 64, 2, 64)

        def f(q, x):
            out = torch.ops.xstage.attention(q, q, q, True, None)[0]
            return out * 2, torch.ops.xstage.moe_forward(x, logits, w1, w2, 2)

        eager = f(q, x)
        compiled = torch.compile(f, fullgraph=True)(q, x)
        for a, b in zip(eager, compiled):
            self.assertTrue(torch.equal(a, b))


if __name__ == "__main__":
    unittest.main()
