"""strata.experiment, load_experiment, shard, load_dataset and Config."""
import os
import unittest

import strata
from python_test_util import temp_root


class ExperimentTest(unittest.TestCase):
    def test_an_experiment_from_a_dict_and_its_statistics(self):
        root = temp_root("experiment")
        out = os.path.join(root, "exp")
        spec = {
            "name": "py-exp",
            "output": out,
            "repeats": 2,
            "baseline": "async",
            "base": {
                "data.synthetic.train_size": 1000,
                "data.synthetic.val_size": 200,
                "train.iterations": 20,
                "train.batch_size": 32,
                "train.threads": 1,
                "cluster.workers": 2,
                "metrics.tensorboard": False,
            },
            "cells": [
                {"name": "async", "set": {"cluster.mode": "async"}},
                {"name": "sync", "set": {"cluster.mode": "sync"}},
            ],
        }
        exp = strata.experiment(spec)
        self.assertEqual(exp.exit_code, 0)
        self.assertEqual([c["name"] for c in exp.cells], ["async", "sync"])
        for c in exp.cells:
            acc = c["metrics"]["final_val_acc"]
            self.assertEqual(acc["n"], 2)
            self.assertGreater(acc["mean"], 0.2)
            self.assertGreaterEqual(acc["variance"], 0.0)
        # The baseline's ratio with itself is 1 (when it varies at all).
        base = exp.cell("async")["metrics"]["final_val_acc"]
        if base["variance"]:
            self.assertAlmostEqual(base["variance_ratio"], 1.0)
        self.assertEqual(len(exp.runs), 4)
        means = [r.summary.final_val_acc for r in exp.runs
                 if r.summary.mode == "sync"]
        self.assertAlmostEqual(sum(means) / len(means),
                               exp.cell("sync")["metrics"]["final_val_acc"]
                               ["mean"])
        again = strata.load_experiment(out)
        self.assertEqual(again.summary["cells"], exp.summary["cells"])
        with self.assertRaises(strata.NotFound):
            strata.load_experiment(os.path.join(root, "nothing"))
        with self.assertRaises(strata.InvalidArgument) as e:
            strata.experiment({k: v for k, v in spec.items() if k != "name"})
        self.assertIn("'name'", str(e.exception))


class ShardTest(unittest.TestCase):
    def test_a_stratified_plan_covers_every_example_once(self):
        root = temp_root("shard")
        plan = strata.shard("synthetic", "stratified", 4,
                            out=os.path.join(root, "plan.json"),
                            data__synthetic__train_size=1000, seed=5)
        self.assertEqual(len(plan.workers), 4)
        every = sorted(i for w in plan.workers for i in w)
        self.assertEqual(every, list(range(1000)))
        self.assertLess(plan.max_tv, 0.05)
        self.assertTrue(os.path.exists(plan.path))
        self.assertEqual(plan.report["num_workers"], 4)
        with self.assertRaises(strata.InvalidArgument) as e:
            strata.shard("synthetic", "sorted", 4)
        self.assertIn("data.sharding.method", str(e.exception))


class ConfigAndDataTest(unittest.TestCase):
    def test_nested_and_dotted_keys_and_typed_values(self):
        c = strata.Config({"cluster": {"mode": "sync"}, "train.lr": 0.5},
                          cluster__workers=3)
        self.assertEqual(c["cluster.mode"], "sync")
        self.assertEqual(c["train.lr"], 0.5)
        self.assertEqual(c["cluster.workers"], 3)
        self.assertIs(c.to_dict()["data.normalize"], True)
        with self.assertRaises(strata.InvalidArgument) as e:
            c["train.lr"] = "fast"
        self.assertIn("train.lr", str(e.exception))
        with self.assertRaises(strata.InvalidArgument) as e:
            c["train.lrr"] = 0.1
        self.assertIn("train.lrr", str(e.exception))
        import numpy
        c["cluster.workers"] = numpy.int64(5)
        c["train.lr"] = numpy.float32(0.25)
        self.assertEqual((c["cluster.workers"], c["train.lr"]), (5, 0.25))
        with self.assertRaises(strata.InvalidArgument) as e:
            c["cluster.workers"] = 2 ** 70
        self.assertIn("cluster.workers", str(e.exception))
        names = [k[0] for k in strata.schema()]
        self.assertIn("cluster.mode", names)

    def test_the_dataset_as_strata_sees_it(self):
        d = strata.load_dataset(data__synthetic__train_size=300,
                                data__synthetic__val_size=100)
        self.assertEqual(tuple(d.train.features.shape), (300, 1, 1, 64))
        self.assertEqual(len(d.val), 100)
        self.assertEqual(d.train.classes, 10)
        # Standardised (data.normalize): mean ~0 over the training split.
        self.assertLess(abs(float(d.train.features.mean())), 0.05)


if __name__ == "__main__":
    unittest.main()
