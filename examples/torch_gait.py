"""The CASIA-B evaluation of a gait checkpoint written in PyTorch with xstage.gait: read the
preprocessed sequences, embed each with the trained model, compute the rank-1 table. The
same numbers as `gait eval`, from code a researcher can change (swap the model for their
own and keep the protocol, or the reverse).

    PYTHONPATH=build/python python3 examples/torch_gait.py --ckpt RUN/latest.gckpt --cache DATA/cache
    [--train-last 74] [--device cpu] [--chunk 256] [--json out.json]

--cache is the folder of .gseq files that `gait preprocess` (or `gait train`) writes.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

import xstage.gait as gait


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckpt", required=True, type=Path, help="a gait train checkpoint (.gckpt)")
    ap.add_argument("--cache", required=True, type=Path, help="the preprocessed sequences (.gseq files)")
    ap.add_argument("--train-last", type=int, default=None,
                    help="last training subject (default: the checkpoint's training identities)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--chunk", type=int, default=256, help="sequences held and embedded per call (memory bound)")
    ap.add_argument("--json", type=Path, help="also write the table here")
    args = ap.parse_args()
    if args.chunk < 1:
        sys.exit(f"torch_gait: --chunk must be at least 1, got {args.chunk}")
    model = gait.Model(args.ckpt, args.device)
    train_last = args.train_last
    if train_last is None:  # the classifier's identities are the training subjects
        train_last = max(model.info()["classes"])
    test = gait.SequenceDataset(args.cache, split="test", train_last_subject=train_last)
    if not len(test):
        sys.exit(f"torch_gait: no sequence of a subject above {train_last} under {args.cache}")
    ids, rows, sils, poses = [], [], [], []

    def flush():  # whole sequences, as the evaluation embeds them; equal lengths share a pass
        if sils:
            rows.append(model.embed(sils if model.needs_silhouettes else None, poses if model.needs_pose else None))
            sils.clear()
            poses.clear()

    for n, item in enumerate(test, 1):
        ids.append(item["sequence_id"])
        sils.append(item["silhouettes"])
        poses.append(item["pose"])
        if len(sils) == args.chunk or n == len(test):
            flush()
        if sys.stderr.isatty() and (n % 20 == 0 or n == len(test)):
            print(f"\rembedding: {n}/{len(test)} test sequences", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    table = gait.rank1(torch.cat(rows), ids, train_last)

    print(f"{len(ids)} test sequences")
    print(gait.format_rank1(table))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TypeError, RuntimeError) as e:  # the operators' errors name what is wrong
        sys.exit(f"torch_gait: {e}")
