#!/usr/bin/env python3
"""Training-step timing of a GaitGL-equivalent network in plain PyTorch eager: the
baseline a user would run (OpenGait-style: eager mode, autocast), to compare with
`gait train` at the same batch, frames and precision.

The network follows the GaitGL paper (Lin, Zhang, Yu, "Gait Recognition via Effective
Global-Local Feature Representation and Local Temporal Aggregation", ICCV 2021), its
CASIA-B configuration:
  3-D conv (1 -> c0)                     [n, 1, s, 64, 44] -> [n, c0, s, 64, 44]
  local temporal aggregation (LTA):      3-frame conv with stride 3 -> [n, c0, s/3, 64, 44]
  GLConv A (c0 -> c1, global + local, summed)
  spatial max pool 2x2                   -> [n, c1, s/3, 32, 22]
  GLConv A (c1 -> c2, summed)
  GLConv B (c2 -> c2, global and local stacked along the height) -> [n, c2, s/3, 64, 22]
  temporal max pooling                   -> [n, c2, 64, 22]
  GeM pooling of each row (learnable p)  -> [n, c2, 64] (64 horizontal parts)
  separate FCs (one per part)            -> [n, c2, 64]   (triplet loss, margin 0.2, batch-all)
  BNNeck + separate FCs to the classes   -> [n, classes, 64] (cross-entropy, label smoothing)
A GLConv's global branch is a 3x3x3 conv over the whole map; its local branch splits
the map into 2^halving horizontal strips and applies one shared 3x3x3 conv to each
strip alone (zero padding at the strip borders), so local features never mix parts.

Timing: P x K sequences of T frames of 64x44 silhouettes, random binary tensors made
once on the host (pinned) and copied to the device every step, as a data loader would
deliver them (--data device keeps them on the device instead). A step is copy, forward
(autocast), loss, backward, Adam step. Warm-up steps are not timed; each timed step is
measured with CUDA events (wall clock on the CPU). Prints one table row and writes JSON:
sequences/s (batch over the mean timed step), the median step in ms, p10/p90.

  python3 gaitgl_train_timing.py --device cuda --json out.json      # 8 x 8 x 30, bf16
  python3 gaitgl_train_timing.py --device cpu --smoke               # tiny sizes, seconds
"""
import argparse
import contextlib
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- network
def conv3d(cin, cout, kernel=(3, 3, 3), stride=(1, 1, 1), padding=(1, 1, 1)):
    """Bias-free 3-D conv, as in GaitGL (the activation follows outside, because GLConv
    sums or stacks its branches around it). [n, cin, s, h, w] -> [n, cout, s', h, w]"""
    return nn.Conv3d(cin, cout, kernel, stride, padding, bias=False)


class GLConv(nn.Module):
    """Global and local 3-D convolution. [n, cin, s, h, w] -> [n, cout, s, h, w] when
    `stack` is false (branches summed after the activation), [n, cout, s, 2h, w] when
    true (branches stacked along the height). `fold`: run the local conv once on the
    strips moved into the batch axis instead of once per strip (the same arithmetic)."""

    def __init__(self, cin, cout, halving, stack, fold=False):
        super().__init__()
        self.strips = 2 ** halving
        self.stack = stack
        self.fold = fold
        self.global_conv = conv3d(cin, cout)
        self.local_conv = conv3d(cin, cout)

    def local(self, x):
        n, c, s, h, w = x.shape
        k = self.strips
        if not self.fold:
            return torch.cat([self.local_conv(part) for part in x.split(h // k, dim=3)], dim=3)
        parts = x.view(n, c, s, k, h // k, w).permute(0, 3, 1, 2, 4, 5).reshape(n * k, c, s, h // k, w)
        y = self.local_conv(parts)
        co = y.shape[1]
        return y.view(n, k, co, s, h // k, w).permute(0, 2, 3, 1, 4, 5).reshape(n, co, s, h, w)

    def forward(self, x):
        g = self.global_conv(x)
        loc = self.local(x)
        if self.stack:
            return F.leaky_relu(torch.cat([g, loc], dim=3), inplace=True)
        return F.leaky_relu(g, inplace=True) + F.leaky_relu(loc, inplace=True)


class GeM(nn.Module):
    """Generalised-mean pooling of each row over the width, learnable exponent p.
    [n, c, h, w] -> [n, c, h]"""

    def __init__(self, p=6.5, eps=1e-6):
        super().__init__()
        self.p = nn.Parameter(torch.ones(1) * p)
        self.eps = eps

    def forward(self, x):
        return x.float().clamp(min=self.eps).pow(self.p).mean(dim=-1).pow(1.0 / self.p)


class SeparateFCs(nn.Module):
    """One linear map per part. [n, cin, p] -> [n, cout, p]"""

    def __init__(self, parts, cin, cout):
        super().__init__()
        self.weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(parts, cin, cout)))

    def forward(self, x):
        return torch.einsum("ncp,pco->nop", x, self.weight)


class GaitGL(nn.Module):
    def __init__(self, channels=(32, 64, 128), classes=74, halving=3, fold=False):
        super().__init__()
        c0, c1, c2 = channels
        self.conv0 = conv3d(1, c0)
        self.lta = conv3d(c0, c0, kernel=(3, 1, 1), stride=(3, 1, 1), padding=(0, 0, 0))
        self.gl_a0 = GLConv(c0, c1, halving, stack=False, fold=fold)
        self.pool = nn.MaxPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2))
        self.gl_a1 = GLConv(c1, c2, halving, stack=False, fold=fold)
        self.gl_b2 = GLConv(c2, c2, halving, stack=True, fold=fold)
        self.gem = GeM()
        self.parts = 64
        self.fc = SeparateFCs(self.parts, c2, c2)
        self.bn = nn.BatchNorm1d(c2)  # over the channels, shared by the parts
        self.cls = SeparateFCs(self.parts, c2, classes)

    def forward(self, sil):
        """sil [n, s, 64, 44] in [0, 1] -> (embeddings [n, c2, 64], logits [n, classes, 64])"""
        x = sil.unsqueeze(1)                             # [n, 1, s, 64, 44]
        x = F.leaky_relu(self.conv0(x), inplace=True)    # [n, c0, s, 64, 44]
        x = F.leaky_relu(self.lta(x), inplace=True)      # [n, c0, s/3, 64, 44]
        x = self.pool(self.gl_a0(x))                     # [n, c1, s/3, 32, 22]
        x = self.gl_a1(x)                                # [n, c2, s/3, 32, 22]
        x = self.gl_b2(x)                                # [n, c2, s/3, 64, 22]
        x = x.max(dim=2)[0]                              # [n, c2, 64, 22]
        emb = self.fc(self.gem(x))                       # [n, c2, 64]
        logits = self.cls(self.bn(emb))                  # [n, classes, 64]
        return emb, logits


# ----------------------------------------------------------------------------- losses
def triplet_batch_all(emb, labels, k, margin=0.2):
    """Batch-all triplet loss per part, averaged over the triplets that violate the
    margin (OpenGait's convention). emb [n, c, p], labels [n], k sequences per identity
    (given, not counted, so the step never waits for the device)"""
    x = emb.float().permute(2, 0, 1)                     # [p, n, c]
    d = torch.cdist(x, x)                                # [p, n, n]
    same = labels[:, None] == labels[None, :]
    n = labels.shape[0]
    ap = d[:, same].view(d.shape[0], n, k)               # [p, n, k]
    an = d[:, ~same].view(d.shape[0], n, n - k)          # [p, n, n-k]
    loss = F.relu(ap.unsqueeze(3) - an.unsqueeze(2) + margin)
    active = (loss > 0).sum().clamp(min=1)
    return loss.sum() / active


def gait_loss(emb, logits, labels, k, smoothing=0.1):
    """Triplet + cross-entropy, both weight 1 (as `gait train`'s configs)."""
    ce = F.cross_entropy(logits.float(), labels[:, None].expand(-1, logits.shape[-1]), label_smoothing=smoothing)
    return triplet_batch_all(emb, labels, k) + ce


# ----------------------------------------------------------------------------- timing
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--batch-p", type=int, default=8)
    ap.add_argument("--batch-k", type=int, default=8)
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--channels", type=int, nargs=3, default=[32, 64, 128])
    ap.add_argument("--classes", type=int, default=74, help="training identities (CASIA-B: 74)")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"],
                    help="autocast dtype (fp32: no autocast); fp16 uses a gradient scaler")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps (cuDNN autotuning, allocator)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps")
    ap.add_argument("--data", default="host", choices=["host", "device"],
                    help="host: pinned host batch copied every step; device: batch stays on the device")
    ap.add_argument("--local", default="loop", choices=["loop", "fold"],
                    help="local branch: one conv call per strip (as GaitGL is usually written) or strips folded into the batch")
    ap.add_argument("--no-cudnn-benchmark", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes for a CPU check: 2 x 2 x 6 frames, channels 4 8 8")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--json", default="", help="write the result here")
    a = ap.parse_args(argv)
    if a.smoke:
        a.batch_p, a.batch_k, a.frames, a.channels, a.classes = 2, 2, 6, [4, 8, 8], 4
        a.warmup, a.steps = 1, 2
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is false (use --device cpu)")
    if a.frames % 3 or a.frames < 3:
        ap.error(f"--frames {a.frames}: local temporal aggregation needs a multiple of 3")
    if a.classes < a.batch_p:
        ap.error(f"--classes {a.classes} < --batch-p {a.batch_p}")
    return a


class Timer:
    """Per-step times in ms: CUDA events on the GPU (no synchronisation inside the
    loop), the wall clock on the CPU."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.marks = []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def steps_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [1e3 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


def make_batch(a, dev):
    """P identities x K sequences: random silhouettes (a blob per frame, 0/1) and labels."""
    n = a.batch_p * a.batch_k
    g = torch.Generator().manual_seed(1)
    sil = (torch.rand(n, a.frames, 64, 44, generator=g) > 0.6).float()
    labels = torch.arange(a.batch_p).repeat_interleave(a.batch_k)
    if a.data == "device":
        return sil.to(dev), labels.to(dev), False
    return sil.pin_memory(), labels.pin_memory(), True


def run(a):
    dev = torch.device(a.device)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cuda = dev.type == "cuda"
    if not cuda:
        a.data = "device"  # nothing to copy: host and device are the same memory
    if cuda:
        torch.backends.cudnn.benchmark = not a.no_cudnn_benchmark
    model = GaitGL(tuple(a.channels), a.classes, fold=a.local == "fold").to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=5e-4)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[a.precision]
    autocast = torch.autocast(device_type=dev.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()
    scaler = torch.cuda.amp.GradScaler(enabled=cuda and amp_dtype == torch.float16)
    sil_src, lab_src, copy = make_batch(a, dev)
    timer = Timer(cuda)
    losses = []
    for it in range(a.warmup + a.steps):
        if it == a.warmup:
            timer.mark()
        sil = sil_src.to(dev, non_blocking=True) if copy else sil_src
        labels = lab_src.to(dev, non_blocking=True) if copy else lab_src
        opt.zero_grad(set_to_none=True)
        with autocast:
            emb, logits = model(sil)
        loss = gait_loss(emb, logits, labels, a.batch_k)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if it >= a.warmup:
            timer.mark()
        if it == a.warmup + a.steps - 1 or it == 0:
            losses.append(float(loss))  # two synchronisations only: first and last step
    steps = timer.steps_ms()
    n = a.batch_p * a.batch_k
    mean_ms = sum(steps) / len(steps)
    q = statistics.quantiles(steps, n=10, method="inclusive") if len(steps) >= 2 else [steps[0]] * 9
    return {
        "model": "gaitgl_eager",
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "torch": torch.__version__,
        "batch_p": a.batch_p, "batch_k": a.batch_k, "frames": a.frames, "height": 64, "width": 44,
        "channels": a.channels, "classes": a.classes, "precision": a.precision, "data": a.data,
        "local": a.local, "cudnn_benchmark": cuda and not a.no_cudnn_benchmark,
        "warmup_steps": a.warmup, "timed_steps": a.steps, "timing": "cuda events" if cuda else "wall clock",
        "seq_per_s": n / (mean_ms / 1e3),
        "median_step_ms": statistics.median(steps),
        "p10_step_ms": q[0], "p90_step_ms": q[-1], "mean_step_ms": mean_ms,
        "first_loss": losses[0], "last_loss": losses[-1],
        "smoke": a.smoke,
    }


def self_checks():
    """Run by --smoke: the folded local branch equals the per-strip one, and the
    batch-all triplet loss equals its definition written as loops."""
    torch.manual_seed(3)
    loop = GLConv(2, 3, halving=2, stack=True)
    fold = GLConv(2, 3, halving=2, stack=True, fold=True)
    fold.load_state_dict(loop.state_dict())
    x = torch.randn(2, 2, 3, 16, 6)
    if not torch.allclose(loop(x), fold(x), atol=1e-5):
        return "GLConv: the folded local branch differs from the per-strip one"
    emb, labels, k, margin = torch.randn(6, 4, 2), torch.tensor([0, 0, 1, 1, 2, 2]), 2, 0.2
    total, active = 0.0, 0
    for p in range(emb.shape[2]):
        d = torch.cdist(emb[:, :, p], emb[:, :, p])
        for i in range(6):
            for j in range(6):
                for m in range(6):
                    if labels[j] == labels[i] and labels[m] != labels[i]:
                        v = max(0.0, float(d[i, j] - d[i, m]) + margin)
                        total += v
                        active += v > 0
    ref = total / max(active, 1)
    got = float(triplet_batch_all(emb, labels, k, margin))
    if abs(got - ref) > 1e-4 * max(1.0, abs(ref)):
        return f"triplet loss {got} differs from the loop reference {ref}"
    return ""


def main(argv):
    a = parse_args(argv)
    if a.smoke:
        problem = self_checks()
        if problem:
            print(f"gaitgl: {problem}", file=sys.stderr)
            return 1
    r = run(a)
    if not all(map(lambda v: v == v and abs(v) != float("inf"), (r["first_loss"], r["last_loss"]))):
        print(f"gaitgl: loss not finite ({r['first_loss']}, {r['last_loss']})", file=sys.stderr)
        return 1
    print("| model | device | batch | frames | precision | seq/s | median step ms | p10 | p90 |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| gaitgl_eager ({r['local']}, data {r['data']}) | {r['device']} | {a.batch_p}x{a.batch_k} | {a.frames} | "
          f"{a.precision} | {r['seq_per_s']:.1f} | {r['median_step_ms']:.2f} | {r['p10_step_ms']:.2f} | {r['p90_step_ms']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
