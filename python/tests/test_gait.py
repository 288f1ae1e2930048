"""xstage.gait (torch.ops.gait, torch.classes.gait.Model) against the `gait` CLI on one small
generated dataset, and rank1 against a reference written here from the protocol (no gait
code). $GAIT_CLI names the gait binary (CTest sets it); without it the tests that need a
dataset and checkpoint are skipped. Run: PYTHONPATH=<build>/python GAIT_CLI=<build>/gait/cli/gait
XSTAGE_SOURCE_DIR=<source> python3 -m unittest discover -s python/tests -p test_gait.py"""

import ast
import csv
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import torch

import xstage

HAVE_GAIT = xstage.build_info().get("gait", False)
if HAVE_GAIT:
    import xstage.gait as gait

GAIT_CLI = os.environ.get("GAIT_CLI")
# The model's device ($XSTAGE_TEST_DEVICE, as test_ops.py); the reference dump is the CLI's
# on the CPU, and cuDNN may use TF32 on the GPU.
DEVICE = os.environ.get("XSTAGE_TEST_DEVICE", "cpu")
EMBED_TOL = 2e-2 if DEVICE.startswith("cuda") else 1e-4
SOURCE = Path(os.environ.get("XSTAGE_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def read_npy_f32(path):
    """A float32 C-order .npy file (version 1.0) -> tensor (numpy is not needed)."""
    raw = Path(path).read_bytes()
    assert raw[:6] == b"\x93NUMPY", path
    header_len = struct.unpack("<H", raw[8:10])[0]
    header = ast.literal_eval(raw[10:10 + header_len].decode("latin1"))
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    data = bytearray(raw[10 + header_len:])
    return torch.frombuffer(data, dtype=torch.float32).reshape(header["shape"]).clone()


def rank1_reference(emb, ids, train_last):
    """The CASIA-B protocol from its definition: per probe set, probe view and other gallery
    view, the share of probes whose nearest gallery sequence (nm-01..04, Euclidean per part,
    averaged over parts) has their subject, in % rounded to 2 places; per-view means over
    the other views, set means over the probe views."""
    keys = []
    for s in ids:
        sid, cond, nn, view = s.split("-")
        keys.append((int(sid), cond, int(nn), int(view)))
    test = [i for i, k in enumerate(keys) if k[0] > train_last]
    views = sorted({keys[i][3] for i in test})
    gallery = [i for i in test if keys[i][1] == "nm" and keys[i][2] <= 4]
    sets = {"NM": ("nm", (5, 6)), "BG": ("bg", (1, 2)), "CL": ("cl", (1, 2))}
    dist = (emb.double().unsqueeze(1) - emb.double().unsqueeze(0)).norm(dim=2).mean(dim=2)  # [n, n]
    out = {}
    for name, (cond, nums) in sets.items():
        per_view = []
        for v1 in views:
            probes = [i for i in test if keys[i][1] == cond and keys[i][2] in nums and keys[i][3] == v1]
            accs = []
            for v2 in views:
                g = [j for j in gallery if keys[j][3] == v2]
                if v2 == v1 or not probes or not g:
                    continue
                hits = sum(keys[g[int(torch.argmin(dist[i, g]))]][0] == keys[i][0] for i in probes)
                accs.append(round(100.0 * hits / len(probes), 2))
            per_view.append(sum(accs) / len(accs) if accs else math.nan)
        out[name] = {"per_view": per_view, "mean": sum(per_view) / len(per_view)}
    return views, out


@unittest.skipUnless(HAVE_GAIT, "libxstage_torch.so was built without the gait library")
class Rank1Test(unittest.TestCase):
    def test_matches_the_protocol_reference(self):
        rng = random.Random(5)
        ids = []
        for sid in range(3, 9):  # subjects 3-4 train, 5-8 test
            for cond, count in (("nm", 6), ("bg", 2), ("cl", 2)):
                for nn in range(1, count + 1):
                    for view in (0, 90, 180):
                        if rng.random() < 0.9:  # a few sequences missing
                            ids.append(f"{sid:03d}-{cond}-{nn:02d}-{view:03d}")
        g = torch.Generator().manual_seed(3)
        centres = torch.randn(10, 8, 4, generator=g)
        emb = torch.stack([centres[int(s[:3])] + 1.6 * torch.randn(8, 4, generator=g) for s in ids])
        got = gait.rank1(emb, ids, train_last_subject=4)
        views, want = rank1_reference(emb, ids, 4)
        self.assertEqual(got["views"], views)
        for name in ("NM", "BG", "CL"):
            for a, b in zip(got[name]["per_view"], want[name]["per_view"]):
                self.assertAlmostEqual(a, b, delta=0.006, msg=name)
            self.assertAlmostEqual(got[name]["mean"], want[name]["mean"], delta=0.006, msg=name)
        # Not all 100: the noise makes the test able to tell a wrong neighbour.
        self.assertLess(min(got["NM"]["per_view"] + got["CL"]["per_view"]), 100.0)
        # As text: the views, then a row per probe set with its mean; n/a for a missing value.
        got["BG"]["per_view"][1] = None
        lines = gait.format_rank1(got).splitlines()
        self.assertEqual(lines[0].split(), ["0", "90", "180"])
        self.assertEqual(lines[1].split()[:2], ["NM", f"{got['NM']['per_view'][0]:.2f}"])
        self.assertEqual(lines[2].split()[2], "n/a")
        self.assertEqual(lines[3].split()[-2:], ["mean", f"{got['CL']['mean']:.2f}"])

    def test_bad_arguments_say_what(self):
        emb = torch.zeros(2, 4, 3)
        with self.assertRaisesRegex(ValueError, "2 sequence ids for 3"):
            gait.rank1(torch.zeros(3, 4, 3), ["075-nm-01-000", "075-nm-05-090"])
        with self.assertRaisesRegex(ValueError, "sequence id 1 '075-xx-05-090' is not"):
            gait.rank1(emb, ["075-nm-01-000", "075-xx-05-090"])
        with self.assertRaisesRegex(TypeError, "embeddings must be float32"):
            gait.rank1(emb.double(), ["075-nm-01-000", "075-nm-05-090"])
        with self.assertRaisesRegex(ValueError, r"embeddings must be 3-D \[n, c, p\]"):
            gait.rank1(emb[0], ["075-nm-01-000", "075-nm-05-090"])


@unittest.skipUnless(HAVE_GAIT, "libxstage_torch.so was built without the gait library")
class PreprocessTest(unittest.TestCase):
    def test_drops_empty_frames_and_cuts_64_by_44(self):
        frames = torch.zeros(3, 120, 160, dtype=torch.uint8)
        frames[1, 20:100, 60:90] = 255  # a standing block, off centre
        frames[2, 10:110, 100:120] = 255
        sil, kept = gait.preprocess(frames)
        self.assertEqual(tuple(sil.shape), (2, 64, 44))
        self.assertEqual(sil.dtype, torch.uint8)
        self.assertEqual(kept.tolist(), [1, 2])
        # Cropped to its rows and centred on its mass: foreground in every row, centred.
        self.assertTrue(bool((sil[0].amax(dim=1) > 0).all()))
        cols = sil[0].float().sum(dim=0)
        centre = float((cols * torch.arange(44)).sum() / cols.sum())
        self.assertAlmostEqual(centre, 21.5, delta=1.0)

    def test_bad_arguments_say_what(self):
        with self.assertRaisesRegex(TypeError, "frames must be"):
            gait.preprocess(torch.zeros(2, 10, 10))
        with self.assertRaisesRegex(ValueError, r"frames must be 3-D \[T, H, W\]"):
            gait.preprocess(torch.zeros(1, 2, 10, 10, dtype=torch.uint8))


@unittest.skipUnless(HAVE_GAIT and GAIT_CLI, "needs the gait library and $GAIT_CLI")
class ModelTest(unittest.TestCase):
    """One 2-iteration tiny two-branch run on an 8-subject, 2-view generated set; the CLI's
    evaluation dump is the reference for the Python model."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        t = Path(cls.tmp.name)
        cls.data, cls.run_dir = t / "data", t / "run"

        def cli(*args):
            subprocess.run([GAIT_CLI, *map(str, args), "--no-progress"], check=True, stdout=subprocess.DEVNULL)

        cli("synth", "--small", "--views", "0,90", "--out", cls.data)
        cli("train", "--config", SOURCE / "gait/configs/tiny-cpu.json", "--data", cls.data, "--out", cls.run_dir,
            "--iterations", 2, "--threads", 1)
        cli("eval", "--ckpt", cls.run_dir / "latest.gckpt", "--dump-embeddings", t / "emb", "--threads", 1)
        cls.dump = read_npy_f32(t / "emb.npy")
        with open(t / "emb.csv", newline="") as f:
            cls.ids = [row["sequence_id"] for row in csv.DictReader(f)]
        cls.rank1_json = (cls.run_dir / "eval" / "rank1.json").read_text()
        cls.cache = {p.stem: p for p in cls.data.rglob("*.gseq")}
        cls.model = gait.Model(cls.run_dir / "latest.gckpt", DEVICE)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_embedding_equals_gait_eval(self):
        m = self.model
        self.assertEqual((m.channels, m.parts), tuple(self.dump.shape[1:]))
        self.assertTrue(m.needs_silhouettes and m.needs_pose)
        for row, sid in list(enumerate(self.ids))[:6]:
            sil, pose, read_id = gait.read_sequence(self.cache[sid])
            self.assertEqual(read_id, sid)
            got = m.embed(sil, pose)
            err = (got - self.dump[row]).abs().max().item()
            self.assertLess(err, EMBED_TOL * max(1.0, self.dump[row].abs().max().item()), sid)

    def test_a_batch_equals_one_clip_at_a_time(self):
        clips = [gait.read_sequence(self.cache[sid]) for sid in self.ids[:3]]
        t = min(c[0].shape[0] for c in clips)
        sil = torch.stack([c[0][:t] for c in clips])
        pose = torch.stack([c[1][:t] for c in clips])
        batch = self.model.embed(sil, pose)
        self.assertEqual(tuple(batch.shape), (3, self.model.channels, self.model.parts))
        for i in range(3):
            self.assertLess((batch[i] - self.model.embed(sil[i], pose[i])).abs().max().item(), EMBED_TOL)

    def test_a_list_of_clips_of_any_lengths_equals_one_at_a_time(self):
        clips = [gait.read_sequence(self.cache[sid]) for sid in self.ids[:4]]
        clips[1] = (clips[1][0][:7], clips[1][1][:7], clips[1][2])  # another length
        got = self.model.embed([c[0] for c in clips], [c[1] for c in clips])
        self.assertEqual(tuple(got.shape), (4, self.model.channels, self.model.parts))
        for i, (sil, pose, _) in enumerate(clips):
            self.assertLess((got[i] - self.model.embed(sil, pose)).abs().max().item(), EMBED_TOL)
        with self.assertRaisesRegex(ValueError, "2 silhouette clips but 1 pose clips"):
            self.model.embed([clips[0][0], clips[1][0]], [clips[0][1]])
        with self.assertRaisesRegex(ValueError, r"pose\[1\] has size 6 in dimension 1 .* T of silhouettes\[1\]"):
            self.model.embed([clips[0][0], clips[1][0]], [clips[0][1], clips[1][1][:6]])
        with self.assertRaisesRegex(ValueError, r"silhouettes\[0\] must be one clip"):
            self.model.embed([clips[0][0].unsqueeze(0)], [clips[0][1]])

    def test_rank1_of_the_dump_equals_gait_eval(self):
        train_last = min(int(s[:3]) for s in self.ids) - 1  # the dump holds the test subjects
        # eval's rank1.json: {"rank1": the table, and what was evaluated}
        self.assertEqual(gait.rank1(self.dump, self.ids, train_last), json.loads(self.rank1_json)["rank1"])

    def test_the_example_prints_gait_evals_table(self):
        folder = self.cache[self.ids[0]].parent.parent  # <cache>/<sid>/<id>.gseq
        out = Path(self.tmp.name) / "example.json"
        subprocess.run([sys.executable, SOURCE / "examples/torch_gait.py", "--ckpt", self.run_dir / "latest.gckpt",
                        "--cache", folder, "--json", out], check=True, stdout=subprocess.DEVNULL)
        self.assertEqual(json.loads(out.read_text()), json.loads(self.rank1_json)["rank1"])

    def test_the_training_example_trains_and_prints_a_table(self):
        out = Path(self.tmp.name) / "train_example.json"
        run = subprocess.run([sys.executable, SOURCE / "examples/torch_gait_train.py", "--cache", self.data / "cache",
                              "--iterations", "2", "--p", "2", "--k", "2", "--frames", "8", "--json", out],
                             check=True, capture_output=True, text=True)
        self.assertIn("train: 2/2 loss", run.stderr)
        table = json.loads(out.read_text())
        self.assertEqual(table["views"], [0, 90])
        for name in ("NM", "BG", "CL"):
            self.assertTrue(all(0 <= v <= 100 for v in table[name]["per_view"]), table[name])
        bad = subprocess.run([sys.executable, SOURCE / "examples/torch_gait_train.py", "--cache", self.data / "cache",
                              "--p", "0"], capture_output=True, text=True)
        self.assertEqual((bad.returncode, bad.stderr.strip()), (1, "torch_gait_train: --p must be at least 1, got 0"))

    def test_read_frames_then_preprocess_equals_the_cache(self):
        sid = self.ids[0]
        sil, _, _ = gait.read_sequence(self.cache[sid])
        subject, cond, nn, view = sid.split("-")
        folder = self.data / "silhouettes" / subject / f"{cond}-{nn}" / view
        frames, frame_ids = gait.read_frames(folder)
        self.assertEqual(frames.shape[0], len(list(folder.glob("*.png"))))
        self.assertTrue(bool((frame_ids[1:] > frame_ids[:-1]).all()))
        got, kept = gait.preprocess(frames)
        self.assertTrue(torch.equal(got, sil), sid)
        self.assertEqual(len(kept), sil.shape[0])
        # A corrupt frame is skipped with a warning naming it; a folder without frames is an error.
        bad = Path(self.tmp.name) / "bad" / view
        bad.mkdir(parents=True)
        for p in sorted(folder.glob("*.png"))[:6]:
            (bad / p.name).write_bytes(p.read_bytes())
        (bad / f"{sid}-999.png").write_bytes(b"not a png")
        with self.assertWarnsRegex(UserWarning, f"{sid}-999.png"):
            frames, _ = gait.read_frames(bad)
        self.assertEqual(frames.shape[0], 6)
        with self.assertRaisesRegex(ValueError, "no readable frame"):
            gait.read_frames(Path(self.tmp.name))

    def test_heads_scale_and_info(self):
        m = gait.Model(self.run_dir / "latest.gckpt")
        info = m.info()
        self.assertEqual(m.heads, info["config"]["evaluator"]["heads"])
        m.heads = "fused"
        parts = m.parts
        m.heads = "fused+branches"
        self.assertEqual(m.parts, 3 * parts)
        m.skeleton_scale = 0.5
        self.assertEqual(m.skeleton_scale, 0.5)
        self.assertEqual(info["iteration"], 2)
        self.assertIn("model", info["config"])

    def test_sequence_dataset_lists_and_splits_the_cache(self):
        root = self.data / "cache"
        everything = gait.SequenceDataset(root)
        self.assertEqual(sorted(everything.sequence_ids), sorted(self.cache))  # listed in key order (nm, bg, cl)
        train = gait.SequenceDataset(root, split="train", train_last_subject=5)
        test = gait.SequenceDataset(root, split="test", train_last_subject=5)
        self.assertEqual(sorted(train.sequence_ids + test.sequence_ids), sorted(everything.sequence_ids))
        self.assertTrue(all(int(s[:3]) <= 5 for s in train.sequence_ids))
        self.assertEqual(test.subjects, [6, 7, 8])
        for i in range(0, len(test), 7):
            item = test[i]
            sil, pose, sid = gait.read_sequence(self.cache[test.sequence_ids[i]])
            self.assertEqual(item["sequence_id"], sid)
            self.assertTrue(torch.equal(item["silhouettes"], sil) and torch.equal(item["pose"], pose), sid)
            subject, cond, nn, view = sid.split("-")
            self.assertEqual((item["subject"], item["condition"], item["number"], item["view"]),
                             (int(subject), cond, int(nn), int(view)))
            self.assertEqual(item["label"], test.subjects.index(int(subject)))
            self.assertEqual(int(test.frames[i]), sil.shape[0])
        # By default split as gait train splits the set: 5 of 8 subjects train.
        self.assertEqual((everything.train_last_subject, gait.train_last_subject(8), gait.train_last_subject(124)),
                         (5, 5, 74))
        self.assertEqual(gait.SequenceDataset(root, split="test").sequence_ids, test.sequence_ids)
        bg90 = gait.SequenceDataset(root, conditions=["bg"], views=[90])
        self.assertTrue(len(bg90) > 0)
        self.assertEqual(bg90.sequence_ids, [s for s in everything.sequence_ids if s.endswith("090") and "-bg-" in s])

    def test_sequence_dataset_clips_and_pxk_batches(self):
        root = self.data / "cache"
        data = gait.SequenceDataset(root, clip_frames=30)
        torch.manual_seed(0)
        starts = set()
        for i in range(0, len(data), 5):
            clip = data[i]["silhouettes"]
            full, _, _ = gait.read_sequence(self.cache[data.sequence_ids[i]])
            self.assertEqual(tuple(clip.shape), (30, 64, 44))
            match = [s for s in range(max(1, full.shape[0] - 29)) if torch.equal(clip, full[s:s + 30])]
            self.assertTrue(match, data.sequence_ids[i])  # contiguous
            starts.add(match[0])
        self.assertGreater(len(starts), 1)  # from a random start
        longest = int(data.frames.max())
        looped = gait.SequenceDataset(root, clip_frames=longest + 5)[0]
        full, pose, _ = gait.read_sequence(self.cache[data.sequence_ids[0]])
        idx = torch.arange(longest + 5) % full.shape[0]
        self.assertTrue(torch.equal(looped["silhouettes"], full[idx]) and torch.equal(looped["pose"], pose[idx]))

        sampler = gait.PxKBatchSampler(data, 3, 2, batches=4, seed=7)
        self.assertEqual((len(sampler), sampler.identities), (4, 8))
        batches = list(torch.utils.data.DataLoader(data, batch_sampler=sampler))
        self.assertEqual(len(batches), 4)
        for b in batches:
            self.assertEqual(tuple(b["silhouettes"].shape), (6, 30, 64, 44))
            labels = b["label"].tolist()
            self.assertEqual([labels[j] for j in range(0, 6, 2)], [labels[j] for j in range(1, 6, 2)])  # K = 2 each
            self.assertEqual(len(set(labels)), 3)  # P = 3 identities
        # The same seed gives the same batches; a second pass goes on drawing.
        first = list(gait.PxKBatchSampler(data, 3, 2, batches=4, seed=7))
        again = gait.PxKBatchSampler(data, 3, 2, batches=4, seed=7)
        self.assertEqual(list(again), first)
        self.assertNotEqual(list(again), first)

    def test_sequence_dataset_bad_arguments_say_what(self):
        root = self.data / "cache"
        with self.assertRaisesRegex(ValueError, "split 'dev' is not all, train or test"):
            gait.SequenceDataset(root, split="dev")
        with self.assertRaisesRegex(ValueError, "subjects must be in 1 .. 1048576, got 0"):
            gait.train_last_subject(0)
        with self.assertRaisesRegex(ValueError, "clip_frames must be None or a positive int"):
            gait.SequenceDataset(root, clip_frames=0)
        with self.assertRaisesRegex(ValueError, "gait.scan_cache: .*nowhere: no such cache folder"):
            gait.SequenceDataset(Path(self.tmp.name) / "nowhere")
        data = gait.SequenceDataset(root)
        with self.assertRaisesRegex(ValueError, "P=9 identities per batch but the set has only 8"):
            gait.PxKBatchSampler(data, 9, 2, batches=1)
        with self.assertRaisesRegex(ValueError, "batches must be a positive int"):
            gait.PxKBatchSampler(data, 2, 2, batches=0)
        # A file that cannot be read is left out with a warning naming it.
        bad = Path(self.tmp.name) / "badcache" / "001"
        bad.mkdir(parents=True)
        good = self.cache[data.sequence_ids[0]]
        (bad / good.name).write_bytes(good.read_bytes())
        (bad / "001-nm-02-000.gseq").write_bytes(b"not a cache file")
        with self.assertWarnsRegex(UserWarning, "001-nm-02-000.gseq"):
            one = gait.SequenceDataset(bad.parent)
        self.assertEqual(one.sequence_ids, [data.sequence_ids[0]])

    def test_bad_arguments_say_what(self):
        m = self.model
        sil, pose, _ = gait.read_sequence(self.cache[self.ids[0]])
        with self.assertRaisesRegex(TypeError, "silhouettes must be uint8"):
            m.embed(sil.float(), pose)
        with self.assertRaisesRegex(ValueError, "this model reads skeletons"):
            m.embed(sil)
        with self.assertRaisesRegex(ValueError, "at least 3 frames, got 2"):
            m.embed(sil[:2], pose[:2])
        with self.assertRaisesRegex(ValueError, "must match T of silhouettes"):
            m.embed(sil, pose[:-1])
        with self.assertRaisesRegex(ValueError, "must match the silhouette width"):
            m.embed(sil[:, :, :40].contiguous(), pose)
        with self.assertRaisesRegex(ValueError, "heads 'nonsense'"):
            m.heads = "nonsense"
        with self.assertRaisesRegex(ValueError, "skeleton scale -1"):
            m.skeleton_scale = -1
        missing = Path(self.tmp.name) / "none.gckpt"
        with self.assertRaisesRegex(ValueError, str(missing)):
            gait.Model(missing)
        with self.assertRaisesRegex(ValueError, "gait.read_sequence: .*none.gseq"):
            gait.read_sequence(Path(self.tmp.name) / "none.gseq")


if __name__ == "__main__":
    unittest.main()
