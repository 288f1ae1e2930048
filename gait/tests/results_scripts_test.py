"""The gait results writers (scripts/gait_results.py, scripts/gait_speed_results.py) on
hand-made inputs: the calibration table against CASIA-B's targets, and the phase profile
and throughput rows of a `gait_speed` folder.
    python3 gait/tests/results_scripts_test.py SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SRC = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(SRC, "scripts"))
import gait_results  # noqa: E402
import gait_speed_results  # noqa: E402


def read(path):
    with open(path) as f:
        return json.load(f)


def row(variant, nm, bg, cl):
    return {"variant": variant, "NM": nm, "BG": bg, "CL": cl}


class Calibration(unittest.TestCase):
    def test_measures_each_target_on_the_mean_over_runs(self):
        out = {"rows": [row("silhouette_only", 1, 1, 1)],  # this run's rows lose to the mean
               "mean_over_runs": {"runs": [{"seed": 1}, {"seed": 2}],
                                  "rows": [row("silhouette_only", 96.0, 93.0, 80.0),
                                           row("skeleton_only_natural", 80.0, 70.0, 60.0)]}}
        table, source = gait_results.calibration(out)
        by = {(r["model"], r["quantity"]): r for r in table}
        self.assertEqual(len(table), 6)
        self.assertEqual(by["silhouette_only", "NM"]["measured"], 96.0)
        self.assertTrue(by["silhouette_only", "NM"]["within"])            # 97.4 +- 3
        self.assertEqual(by["silhouette_only", "NM_minus_BG"]["measured"], 3.0)
        self.assertTrue(by["silhouette_only", "NM_minus_BG"]["within"])   # 2.9 +- 2
        self.assertEqual(by["silhouette_only", "NM_minus_CL"]["measured"], 16.0)
        self.assertTrue(by["silhouette_only", "NM_minus_CL"]["within"])   # 13.8 +- 3
        self.assertEqual(by["skeleton_only_natural", "NM"]["difference"], -7.7)
        self.assertFalse(by["skeleton_only_natural", "NM"]["within"])     # 87.7 +- 5
        self.assertTrue(by["skeleton_only_natural", "NM_minus_BG"]["within"])   # 10.0 against 12.9 +- 4
        self.assertEqual(len(source["runs"]), 2)

    def test_a_missing_model_gives_nulls_not_a_pass(self):
        table, source = gait_results.calibration({"rows": [row("silhouette_only", 97.4, 94.5, 83.6)], "seed": 3})
        skel = [r for r in table if r["model"] == "skeleton_only_natural"]
        self.assertTrue(all(r["measured"] is None and r["within"] is None for r in skel))
        self.assertTrue(all(r["within"] for r in table if r["model"] == "silhouette_only"))
        self.assertEqual(source["on"], "this run's rows")

    def test_written_into_the_data_results_file(self):
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "in.json"), os.path.join(d, "out.json")
            with open(src, "w") as f:
                json.dump({"subjects": 124}, f)
            gait_results.write_calibration({"rows": [row("silhouette_only", 90, 88, 70)]}, src, dst)
            doc = read(dst)
            self.assertEqual(doc["subjects"], 124)
            self.assertEqual(len(doc["calibration"]), 6)
            self.assertEqual(read(src), {"subjects": 124})  # the source is not touched


class SeedSpread(unittest.TestCase):
    def test_rows_gain_the_mean_and_spread_of_their_variant(self):
        rows = [row("silhouette_only", 92.0, 90.0, 77.0), row("two_branch_tiny_cpu", 50, 50, 45)]
        mean = {"rows": [{"variant": "silhouette_only", "runs": 2, "NM": 92.5, "BG": 90.5, "CL": 77.5,
                          "NM_spread": 1.0, "BG_spread": 0.5, "CL_spread": 0.25}]}
        gait_results.attach_spread(rows, mean)
        self.assertEqual(rows[0]["seed_spread"], {"NM": 1.0, "BG": 0.5, "CL": 0.25})
        self.assertEqual(rows[0]["mean_over_runs"], {"NM": 92.5, "BG": 90.5, "CL": 77.5, "runs": 2})
        self.assertNotIn("seed_spread", rows[1])


class SpeedResults(unittest.TestCase):
    def test_rows_ratio_and_phases(self):
        with tempfile.TemporaryDirectory() as d:
            for v, step_ms in (("silhouette_only", 25.0), ("two_branch", 50.0)):
                os.makedirs(os.path.join(d, f"run_{v}"))
                with open(os.path.join(d, f"run_{v}", "config.json"), "w") as f:
                    json.dump({"trainer": {"batch_p": 8, "batch_k": 8}, "data": {"clip_length": 30}}, f)
                with open(os.path.join(d, f"run_{v}", "train_log.csv"), "w") as f:
                    f.write("iteration,seq_per_s\n")
                    for i in range(1, 11):  # the first 5 steps are slow: the warm-up leaves them out
                        f.write(f"{i},{64 / ((step_ms * (4 if i <= 5 else 1)) / 1e3)}\n")
            os.makedirs(os.path.join(d, "prof_two_branch"))
            with open(os.path.join(d, "prof_two_branch", "train_summary.json"), "w") as f:
                json.dump({"phase_median_ms": {"forward": 15.0, "backward": 30.0}, "phase_steps": 100}, f)
            with open(os.path.join(d, "gaitgl_loop.json"), "w") as f:
                json.dump({"seq_per_s": 2000.0, "median_step_ms": 32.0, "p10_step_ms": 31.0, "p90_step_ms": 33.0,
                           "timed_steps": 5, "frames": 30, "batch_p": 8, "batch_k": 8, "precision": "bf16"}, f)
            out = os.path.join(d, "s.json")
            rc = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "gait_speed_results.py"), "--runs", d,
                                 "--warmup", "5", "--out", out], capture_output=True, text=True)
            s = read(out)
            self.assertEqual(rc.returncode, 1, rc.stdout)  # gaitgl_fold.json is missing: reported, exit 1
            self.assertAlmostEqual(s["train_seq_per_s"]["silhouette_only"], 2560.0, places=3)
            self.assertAlmostEqual(s["ratio_to_baseline"]["two_branch"], 0.64, places=6)
            self.assertEqual(s["phases"]["two_branch"]["steps"], 100)
            self.assertNotIn("silhouette_only", s["phases"])
            self.assertTrue(any("gaitgl fold" in p for p in s["problems"]))


if __name__ == "__main__":
    unittest.main()
