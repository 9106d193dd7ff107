"""strata.scale: a job started with strata.train goes on with another
number of workers, asked from one of its own callbacks."""
import os
import unittest

import strata
from python_test_util import small_config, temp_root


class ScaleFromACallbackTest(unittest.TestCase):

    def test_a_sync_run_scaled_from_two_to_three_workers_finishes(self):
        root = temp_root("scale")
        config = small_config(root, "grow", **{
            "cluster.mode": "sync", "cluster.workers": 2,
            "cluster.servers": 1, "train.batch_size": 48,
            "train.iterations": 0, "train.epochs": 40,
            "data.synthetic.train_size": 576, "checkpoint.every_updates": 10,
            "cluster.worker_delay_ms": 4})
        run_dir = os.path.join(root, "grow")
        scaled = []

        def on_log(line):
            # Once, after the first lines of the 2-worker run.
            if not scaled and line["step"] >= 20:
                scaled.append(strata.scale(run_dir, 3, timeout=60))

        run = strata.train("mlp", config, on_log=on_log)
        self.assertEqual(len(scaled), 1)
        self.assertEqual((scaled[0].from_workers, scaled[0].to_workers),
                         (2, 3))
        self.assertGreater(scaled[0].since_request_s, 0)
        self.assertEqual(run.summary.raw["workers_count"]
                         if "workers_count" in run.summary.raw
                         else len(run.summary.raw["workers"]), 3)
        events = [m["event"] for m in run.summary.raw["membership"]]
        self.assertEqual(events, ["scale", "resumed"])
        # Every sample of the 40 epochs, on 2 then 3 workers.
        self.assertEqual(run.summary.samples, 40 * 576)
        with self.assertRaises(strata.InvalidArgument):
            strata.scale(run_dir, 3, timeout=1)  # it has 3 already
        with self.assertRaises(strata.InvalidArgument):
            strata.scale(run_dir, drain=[3], timeout=1)  # no worker 3

    def test_a_drained_worker_leaves_and_the_others_go_on(self):
        root = temp_root("drain")
        config = small_config(root, "drain", **{
            "cluster.mode": "local-sgd", "cluster.workers": 3,
            "train.batch_size": 48, "train.iterations": 0,
            "train.epochs": 40, "data.synthetic.train_size": 576,
            "checkpoint.every_updates": 10, "cluster.worker_delay_ms": 4})
        run_dir = os.path.join(root, "drain")
        scaled = []

        def on_log(line):
            if not scaled and line["step"] >= 20:
                scaled.append(strata.scale(run_dir, drain=[1], timeout=60))

        run = strata.train("mlp", config, on_log=on_log)
        self.assertEqual((scaled[0].from_workers, scaled[0].to_workers),
                         (3, 2))
        self.assertEqual(run.summary.raw["membership"][0]["leaving"], [1])
        self.assertEqual(run.summary.samples, 40 * 576)


if __name__ == "__main__":
    unittest.main()
