"""Gait recognition from PyTorch: the gait library of this repository (gait/), as the
`gait` CLI runs it, on a researcher's own tensors.

    import torch, xstage.gait as gait
    model = gait.Model("run/latest.gckpt")                 # a `gait train` checkpoint
    frames, frame_ids = gait.read_frames("001/nm-01/090")   # a CASIA-B view folder of PNGs
    sil, kept = gait.preprocess(frames)                     # raw [T, H, W] uint8 -> [T', 64, 44]
    emb = model.embed(sil)                                  # [c, p] float32 (pose= for skeleton models)
    table = gait.rank1(embeddings, ["075-nm-05-090", ...])  # CASIA-B rank-1, as `gait eval`
    data = gait.SequenceDataset("data/cache", split="train", clip_frames=30)  # for your own training loop
    loader = torch.utils.data.DataLoader(data, batch_sampler=gait.PxKBatchSampler(data, 8, 8, batches=1000))

Each function calls one operator of torch.ops.gait (torch.classes.gait.Model for the
model, torch.classes.gait.PxKSampler for the sampler), registered by libxstage_torch.so
when it was built with the gait library against the same LibTorch. docs/xstage-torch.md
has the contracts.
"""

import json
import os
import warnings

import torch

from . import build_info

__all__ = ["Model", "PxKBatchSampler", "SequenceDataset", "format_rank1", "preprocess", "rank1", "read_frames",
           "read_sequence", "train_last_subject"]

if not build_info().get("gait"):
    raise ImportError("xstage.gait: this libxstage_torch.so was built without the gait library (gait needs "
                      "LibTorch, found by the build as the one the operators use); see docs/xstage-torch.md")

_ops = torch.ops.gait


class Model:
    """A trained checkpoint (`gait train`'s .gckpt) on `device`, in eval mode. embed() gives
    the embedding `gait eval` and `gait embed` compute: the heads and feature of the
    checkpoint's evaluator section unless set_heads / skeleton_scale change them."""

    def __init__(self, checkpoint, device="cpu"):
        self._m = torch.classes.gait.Model(os.fspath(checkpoint), str(torch.device(device)))

    def embed(self, silhouettes=None, pose=None):
        """silhouettes [T, 64, 44] or [n, T, 64, 44] uint8 (255 person, 0 background: the
        output of preprocess) and/or pose [T, 17, 3] or [n, T, 17, 3] float32 (COCO-17 x, y in
        video pixels, confidence), T >= 3, whichever the model reads -> [c, p] or [n, c, p]
        float32 on the CPU. Whole clips, as the CASIA-B evaluation embeds test sequences.
        Lists of single clips of any lengths give [n, c, p]; clips of equal length share
        forward passes, as in `gait eval`."""
        if isinstance(silhouettes, (list, tuple)) or isinstance(pose, (list, tuple)):
            return self._m.embed_list(list(silhouettes or []), list(pose or []))
        return self._m.embed(silhouettes, pose)

    @property
    def channels(self):
        return self._m.channels()

    @property
    def parts(self):
        """Parts of the embedding: the model's parts, 1 for the skeleton head alone, 2x or
        3x for the heads side by side."""
        return self._m.parts()

    @property
    def needs_silhouettes(self):
        return self._m.needs_silhouettes()

    @property
    def needs_pose(self):
        return self._m.needs_pose()

    @property
    def heads(self):
        """fused | fused+branches | branches | silhouette | skeleton."""
        return self._m.heads()

    @heads.setter
    def heads(self, value):
        self._m.set_heads(str(value))

    @property
    def skeleton_scale(self):
        """The skeleton head's weight beside other heads (evaluator.skeleton_scale)."""
        return self._m.skeleton_scale()

    @skeleton_scale.setter
    def skeleton_scale(self, value):
        self._m.set_skeleton_scale(float(value))

    def info(self):
        """The checkpoint's iteration, classes (classifier index -> subject id), full config,
        training seconds and the LibTorch version that wrote it, as a dict."""
        return json.loads(self._m.info())


def preprocess(frames):
    """OpenGait's silhouette pretreatment of raw frames [T, H, W] uint8 (gray, any size):
    crop to the person's rows, resize to height 64, centre on the mass, cut to 64 x 44.
    Returns (silhouettes [T', 64, 44] uint8, kept [T'] int64: the input index of each);
    near-empty and centreless frames are dropped."""
    if frames.dim() == 2:
        frames = frames.unsqueeze(0)
    return _ops.preprocess(frames)


def rank1(embeddings, sequence_ids, train_last_subject=74):
    """CASIA-B rank-1 of embeddings [n, c, p] float32, one sequence id per row
    ("075-nm-05-090": subject, condition and number, view): gallery nm-01..04, probes
    NM nm-05..06, BG bg-01..02, CL cl-01..02, identical views excluded, Euclidean distance
    per part averaged over parts; subjects up to train_last_subject are left out. Returns
    the dict `gait eval` writes as rank1.json (per-view accuracies and means, in %)."""
    return json.loads(_ops.rank1(embeddings, [str(s) for s in sequence_ids], int(train_last_subject)))


def format_rank1(table):
    """rank1()'s dict as text: a line of views, then NM, BG and CL with the accuracy at each
    probe view and their mean (n/a where a view has no probe or no gallery sequence)."""
    def cell(v):
        return "   n/a" if v is None else f"{v:6.2f}"

    lines = ["    " + " ".join(f"{v:6d}" for v in table["views"])]
    for name in ("NM", "BG", "CL"):
        lines.append(f"{name}  {' '.join(cell(v) for v in table[name]['per_view'])}   mean {cell(table[name]['mean'])}")
    return "\n".join(lines)


def train_last_subject(subjects):
    """The last training subject of a set whose highest subject id is `subjects`, as `gait
    train` and `gait eval` split it: 74 of CASIA-B's 124, round(subjects * 74 / 124) of a
    smaller set, at least one subject on each side from 2 subjects."""
    return _ops.train_last_subject(int(subjects))


def read_frames(folder):
    """A CASIA-B view folder of silhouette PNGs (<sid>-<cond>-<nn>-<view>-<frame>.png) ->
    (frames [T, H, W] uint8 as decoded, frame_ids [T] int64), in frame order; unreadable
    or differently sized frames are skipped with a warning. preprocess(frames) then gives
    what `gait preprocess` caches."""
    frames, frame_ids, skipped = _ops.read_frames(os.fspath(folder))
    for line in skipped:
        warnings.warn(f"xstage.gait.read_frames: skipped {line}", stacklevel=2)
    return frames, frame_ids


def read_sequence(path):
    """A preprocessed cache file (.gseq, written by `gait preprocess` / `gait train`) ->
    (silhouettes [T, 64, 44] uint8, pose [T, 17, 3] float32 ([0, 17, 3] without pose),
    sequence id)."""
    return _ops.read_sequence(os.fspath(path))


class SequenceDataset(torch.utils.data.Dataset):
    """The preprocessed sequences of a dataset (the cache `gait preprocess` and `gait train`
    write: CACHE/<sid>/<sequence id>.gseq) as a map-style dataset for a training loop of
    your own, in key order (subject, then nm, bg, cl, number, view). Files that cannot be
    read are left out with a warning naming each.

    split: "all", "train" (subjects 1..train_last_subject) or "test" (the others), as the
    CASIA-B protocol divides them; train_last_subject=None splits as `gait train` does
    (train_last_subject() of the cache's highest subject id: 74 of CASIA-B's 124, the same
    share of a smaller set), and the attribute of that name holds the value used, for
    rank1(). conditions / views keep only those ("nm", "bg", "cl"; degrees).
    clip_frames=None gives whole sequences (their lengths differ: batch_size=None or a
    collate of your own); an int gives a contiguous clip of that many frames from a random
    start (torch's generator, so DataLoader workers draw apart), looped when the sequence
    is shorter, as `gait train` samples; the default collate then stacks them.

    Each item is a dict: silhouettes [T, 64, 44] uint8 (255 person), pose [T, 17, 3]
    float32 ([0, 17, 3] where the dataset has no pose), label (the subject's index among
    this dataset's subjects, for a classifier head), subject, condition, number, view and
    sequence_id."""

    def __init__(self, cache, split="all", train_last_subject=None, conditions=None, views=None, clip_frames=None):
        if split not in ("all", "train", "test"):
            raise ValueError(f"SequenceDataset: split '{split}' is not all, train or test")
        if clip_frames is not None and (isinstance(clip_frames, bool) or not isinstance(clip_frames, int)
                                        or clip_frames < 1):
            raise ValueError(f"SequenceDataset: clip_frames must be None or a positive int, got {clip_frames!r}")
        ids, paths, frames, skipped = _ops.scan_cache(os.fspath(cache))
        for line in skipped:
            warnings.warn(f"xstage.gait.SequenceDataset: left out {line}", stacklevel=2)
        if train_last_subject is None:
            train_last_subject = _ops.train_last_subject(max((int(s[:3]) for s in ids), default=1))
        self.train_last_subject = int(train_last_subject)
        conditions = None if conditions is None else {str(c) for c in conditions}
        views = None if views is None else {int(v) for v in views}
        keep = []
        for i, sid in enumerate(ids):
            subject, cond, number, view = sid.split("-")
            train = int(subject) <= self.train_last_subject
            if (split == "train" and not train) or (split == "test" and train):
                continue
            if (conditions is not None and cond not in conditions) or (views is not None and int(view) not in views):
                continue
            keep.append(i)
        self.sequence_ids = [ids[i] for i in keep]
        self.frames = frames[torch.tensor(keep, dtype=torch.long)]
        self._paths = [paths[i] for i in keep]
        self.subjects = sorted({int(s[:3]) for s in self.sequence_ids})
        index = {s: i for i, s in enumerate(self.subjects)}
        self.labels = [index[int(s[:3])] for s in self.sequence_ids]
        self.clip_frames = clip_frames

    def __len__(self):
        return len(self.sequence_ids)

    def __getitem__(self, i):
        sil, pose, sid = read_sequence(self._paths[i])
        if self.clip_frames is not None:
            t, n = sil.shape[0], self.clip_frames
            start = int(torch.randint(t - n + 1, ())) if t > n else 0
            idx = (start + torch.arange(n)) % t
            sil = sil[idx]
            pose = pose[idx] if pose.shape[0] else pose
        subject, cond, number, view = sid.split("-")
        return {"silhouettes": sil, "pose": pose, "label": self.labels[i], "subject": int(subject),
                "condition": cond, "number": int(number), "view": int(view), "sequence_id": sid}


class PxKBatchSampler(torch.utils.data.Sampler):
    """gait train's batches over a SequenceDataset (or any labels): each batch holds P
    identities, drawn without replacement from a shuffled pass over all of them, and K
    sequences of each (without replacement where the identity has K or more); `batches`
    batches per pass of the loader, each pass going on from where the last one ended. The
    same seed gives the same batches.
    Use as DataLoader(dataset, batch_sampler=PxKBatchSampler(dataset, p, k, batches))."""

    def __init__(self, dataset_or_labels, p, k, batches, seed=0):
        labels = getattr(dataset_or_labels, "labels", dataset_or_labels)
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise ValueError(f"PxKBatchSampler: batches must be a positive int, got {batches!r}")
        self._s = torch.classes.gait.PxKSampler([int(v) for v in labels], int(p), int(k), int(seed))
        self.batches = batches

    @property
    def identities(self):
        return self._s.identities()

    def __iter__(self):
        for _ in range(self.batches):
            yield self._s.next_batch()

    def __len__(self):
        return self.batches
