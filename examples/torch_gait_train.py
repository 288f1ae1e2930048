"""Training a gait network of your own in PyTorch on a preprocessed set with xstage.gait:
`gait train`'s clips and P x K batches (SequenceDataset, PxKBatchSampler) feed a small
GaitSet-style silhouette network written here (a frame CNN, max over time, horizontal
pyramid parts) trained with the batch-all triplet loss; then the CASIA-B rank-1 table of
the test subjects (rank1), as `gait eval` computes it. Swap the network for yours and keep
the data and the protocol.

    PYTHONPATH=build/python python3 examples/torch_gait_train.py --cache DATA/cache
    [--iterations 300] [--p 8] [--k 4] [--lr 1e-3] [--device cpu] [--seed 0] [--json out.json]

--cache is the folder of .gseq files that `gait preprocess` (or `gait train`) writes, of a
`gait synth` set or a real CASIA-B root; subjects split as `gait train` splits them.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

import xstage.gait as gait


class SetNet(nn.Module):
    """Frames [n, T, 64, 44] in [0, 1] -> embeddings [n, channels, parts]: a CNN per frame,
    the max over frames (a set: order-free, any T), then horizontal strips of 1, 2, 4, 8 and
    16 bins, each pooled (mean + max) and projected by its own linear map."""

    bins = (1, 2, 4, 8, 16)

    def __init__(self, channels=128):
        super().__init__()
        act = nn.LeakyReLU(0.01)
        self.frames = nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), act, nn.Conv2d(32, 32, 3, padding=1), act, nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), act, nn.Conv2d(64, 64, 3, padding=1), act, nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), act, nn.Conv2d(128, 128, 3, padding=1), act)
        parts = sum(self.bins)
        self.project = nn.Parameter(torch.empty(parts, 128, channels))
        nn.init.xavier_uniform_(self.project)

    def forward(self, sil):
        n, t = sil.shape[:2]
        x = self.frames(sil.reshape(n * t, 1, *sil.shape[2:]))
        x = x.reshape(n, t, *x.shape[1:]).amax(dim=1)  # [n, 128, 16, 11]
        strips = []
        for b in self.bins:
            z = x.reshape(n, 128, b, -1)
            strips.append(z.mean(-1) + z.amax(-1))  # [n, 128, b]
        f = torch.cat(strips, dim=2).permute(2, 0, 1)  # [parts, n, 128]
        return torch.bmm(f, self.project).permute(1, 2, 0)  # [n, channels, parts]


def batch_all_triplet(emb, labels, margin=0.2):
    """Every (anchor, positive, negative) of the batch, per part: mean of the positive
    hinge terms (the active triplets), averaged over parts; and the active fraction."""
    f = emb.permute(2, 0, 1)  # [p, n, c]
    d = torch.cdist(f, f)  # [p, n, n]
    same = labels[:, None] == labels[None, :]
    pos = same & ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    mask = pos[:, :, None] & ~same[:, None, :]  # [n, n, n]: a, p, n
    hinge = (d[:, :, :, None] - d[:, :, None, :] + margin).clamp_min(0)[:, mask]  # [p, triplets]
    active = (hinge > 0).float().sum(dim=1).clamp_min(1)
    return (hinge.sum(dim=1) / active).mean(), (hinge > 0).float().mean().item()


def train(args, data):
    torch.manual_seed(args.seed)
    net = SetNet().to(args.device)
    print(f"SetNet: {sum(p.numel() for p in net.parameters())} parameters, {args.iterations} iterations of "
          f"{args.p} x {args.k} clips of {args.frames} frames on {args.device}")
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    batches = gait.PxKBatchSampler(data, args.p, args.k, batches=args.iterations, seed=args.seed)
    loader = torch.utils.data.DataLoader(data, batch_sampler=batches)
    net.train()
    for it, b in enumerate(loader, 1):
        sil = b["silhouettes"].to(args.device).float() / 255
        loss, active = batch_all_triplet(net(sil), b["label"].to(args.device))
        if not torch.isfinite(loss):  # before the step, so no weight takes it
            sys.exit(f"torch_gait_train: iteration {it}: the loss is not finite; try a lower --lr")
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sys.stderr.isatty() or it == args.iterations:
            print(f"\rtrain: {it}/{args.iterations} loss {loss.item():.4f} active {active:.3f}", end="",
                  file=sys.stderr)
    print(file=sys.stderr)
    return net


@torch.no_grad()
def evaluate(net, test, device):
    net.eval()
    ids, rows = [], []
    for n, item in enumerate(test, 1):  # whole sequences, one at a time (their lengths differ)
        sil = item["silhouettes"].to(device).float().unsqueeze(0) / 255
        rows.append(net(sil).cpu())
        ids.append(item["sequence_id"])
        if sys.stderr.isatty() and (n % 20 == 0 or n == len(test)):
            print(f"\rembedding: {n}/{len(test)} test sequences", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return gait.rank1(torch.cat(rows), ids, test.train_last_subject)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True, type=Path, help="the preprocessed sequences (.gseq files)")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--p", type=int, default=8, help="identities per batch")
    ap.add_argument("--k", type=int, default=4, help="sequences per identity")
    ap.add_argument("--frames", type=int, default=30, help="frames per training clip")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the table here")
    args = ap.parse_args()
    for name in ("iterations", "p", "k", "frames"):
        if getattr(args, name) < 1:
            sys.exit(f"torch_gait_train: --{name} must be at least 1, got {getattr(args, name)}")
    if not args.lr > 0:
        sys.exit(f"torch_gait_train: --lr must be positive, got {args.lr}")

    data = gait.SequenceDataset(args.cache, split="train", clip_frames=args.frames)
    test = gait.SequenceDataset(args.cache, split="test")
    if not len(data) or not len(test):
        sys.exit(f"torch_gait_train: {args.cache} needs training and test subjects (split after subject "
                 f"{data.train_last_subject}: {len(data)} and {len(test)} sequences)")
    print(f"{len(data)} training sequences of {len(data.subjects)} subjects, {len(test)} test sequences")
    table = evaluate(train(args, data), test, args.device)
    print(gait.format_rank1(table))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TypeError, RuntimeError) as e:  # the operators' errors name what is wrong
        sys.exit(f"torch_gait_train: {e}")
