"""strata.train: a Python-defined model trained on a strata cluster."""
import math
import os
import signal
import subprocess
import unittest

import torch

import strata
from strata.run import load_safetensors, read_jsonl
from python_test_util import Mlp, accuracy, small_config, temp_root


def lines_of(table):
    """run.evals as the lines it was read from: a list as it is; a DataFrame
    (with pandas) row by row, less the NaN cells pandas puts where a line
    lacks a key (only the last eval line has "final")."""
    if isinstance(table, list):
        return table
    return [{k: v for k, v in row.items()
             if not (isinstance(v, float) and math.isnan(v))}
            for row in table.to_dict("records")]


def cli_overrides(config):
    return [a for k, v in config.items()
            for a in ("--set", f"{k}={strata.config.format_value(v)}")]


class SyncMatchesTheCliTest(unittest.TestCase):
    """The same scripted model, config and seed: strata.train in sync PS
    with 2 workers ends where `strata train` ends, bit for bit."""

    def test_same_parameters_as_the_cli_and_the_val_accuracy(self):
        root = temp_root("sync")
        torch.manual_seed(3)
        net = Mlp()
        config = small_config(root, "py", **{
            "cluster.mode": "sync", "cluster.workers": 2,
            "cluster.servers": 1, "run.seed": 11})
        scripted = os.path.join(root, "mlp.pt")
        strata.script_model(net).save(scripted)
        cli = dict(config, **{"run.name": "cli", "model.name": "torchscript",
                              "model.path": scripted})
        done = subprocess.run(
            [strata.training.strata_exe(), "train"] + cli_overrides(cli),
            capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])

        run = strata.train(net, config)
        self.assertFalse(run.interrupted)
        self.assertEqual(run.summary.mode, "sync")
        ours = run.state_dict()
        theirs = load_safetensors(os.path.join(root, "cli",
                                               "model.safetensors"))
        self.assertEqual(sorted(ours), sorted(theirs))
        for name in ours:
            self.assertTrue(torch.equal(ours[name], theirs[name]), name)
        # Trained: not the parameters it started from.
        self.assertFalse(torch.equal(ours["fc1.weight"],
                                     net.state_dict()["fc1.weight"]))

        net.load_state_dict(run.state_dict(), strict=True)
        self.assertEqual(sorted(run.state_dict(net)), sorted(ours))
        with self.assertRaises(strata.InvalidArgument):
            run.state_dict({"fc3.weight": torch.zeros(1)})
        data = strata.load_dataset(config)
        self.assertEqual(len(data.val), 500)
        self.assertAlmostEqual(accuracy(net, data.val),
                               run.summary.final_val_acc,
                               delta=1.0 / len(data.val))
        self.assertGreater(run.summary.final_val_acc, 0.3)


class CallbacksTest(unittest.TestCase):
    def test_every_eval_and_log_line_reaches_the_callbacks(self):
        root = temp_root("callbacks")
        evals, logs = [], []
        run = strata.train(
            Mlp(), small_config(root, "cb", **{
                "cluster.mode": "async", "cluster.workers": 2,
                "train.iterations": 60, "eval.every_updates": 10,
                # Steps of 0..20 ms: the evaluator (at a lower priority)
                # sees the model grow on a loaded machine too; without them
                # the 120 updates took 30 ms and CI's first evaluation came
                # at version 65, its last eval line the final one.
                "cluster.worker_delay_ms": 20}),
            on_eval=evals.append, on_log=logs.append)
        on_disk = read_jsonl(run.file("eval.jsonl"))
        self.assertGreaterEqual(len(on_disk), 3)
        self.assertEqual(evals, on_disk)
        self.assertEqual(logs, read_jsonl(run.file("metrics.jsonl")))
        self.assertEqual(lines_of(run.evals), on_disk)


class ErrorsTest(unittest.TestCase):
    def test_a_bad_override_raises_naming_the_key(self):
        with self.assertRaises(strata.InvalidArgument) as e:
            strata.train("mlp", cluster__mdoe="sync")
        self.assertIn("cluster.mdoe", str(e.exception))
        with self.assertRaises(strata.InvalidArgument) as e:
            strata.train("mlp", {"cluster": {"mode": "fast"}})
        self.assertIn("cluster.mode", str(e.exception))
        self.assertIn("sync", str(e.exception))  # what is allowed
        with self.assertRaises(strata.InvalidArgument) as e:
            strata.train("mlp", {"cluster.workers": "two"})
        self.assertIn("cluster.workers", str(e.exception))

    def test_a_model_torchscript_cannot_compile_names_the_construct(self):
        class Tries(torch.nn.Module):
            def forward(self, x):
                try:
                    return x
                except Exception:
                    return x

        with self.assertRaises(strata.ModelError) as e:
            strata.train(Tries(), {"run.dir": temp_root("tries")})
        self.assertIn("Tries", str(e.exception))
        self.assertIn("try blocks aren't supported", str(e.exception))
        with self.assertRaises(strata.ModelError):
            strata.train(42)

    def test_a_callback_that_raises_stops_the_run_and_raises(self):
        root = temp_root("raises")

        def boom(record):
            raise ValueError("boom from the callback")

        with self.assertRaises(ValueError) as e:
            strata.train(Mlp(), small_config(root, "boom", **{
                "cluster.mode": "async", "cluster.workers": 2,
                "train.iterations": 1000000}), on_log=boom)
        self.assertIn("boom from the callback", str(e.exception))
        notes = "\n".join(getattr(e.exception, "__notes__", []))
        self.assertIn(os.path.join(root, "boom"), notes)
        # The run was stopped and waited for: its summary says so.
        self.assertTrue(strata.load_run(os.path.join(root, "boom"))
                        .summary.interrupted)

    def test_a_model_that_does_not_fit_the_data_raises_from_the_run(self):
        root = temp_root("misfit")
        with self.assertRaises(strata.Error) as e:
            strata.train(Mlp(inputs=10), small_config(root, "misfit"))
        self.assertIn("torchscript", str(e.exception).lower())


class InterruptTest(unittest.TestCase):
    def test_ctrl_c_returns_a_run_marked_interrupted(self):
        root = temp_root("interrupt")
        seen = []

        def first_log(record):
            seen.append(record)
            if len(seen) == 1:
                os.kill(os.getpid(), signal.SIGINT)

        run = strata.train(
            Mlp(), small_config(root, "int", **{
                "cluster.mode": "async", "cluster.workers": 2,
                "train.iterations": 1000000}), on_log=first_log)
        self.assertTrue(run.interrupted)
        self.assertTrue(run.summary.raw["interrupted"])
        self.assertLess(run.summary.steps, 2000000)
        self.assertTrue(os.path.exists(run.file("summary.json")))
        self.assertGreaterEqual(len(run.metrics), 1)


class ResumeTest(unittest.TestCase):
    def test_an_interrupted_run_resumes_to_its_end(self):
        root = temp_root("resume")
        seen = []

        def third_log(record):
            seen.append(record)
            if len(seen) == 3:
                os.kill(os.getpid(), signal.SIGINT)

        run = strata.train(Mlp(), small_config(root, "r", **{
            "cluster.mode": "local", "train.iterations": 20000,
            "checkpoint.every_updates": 20}), on_log=third_log)
        self.assertTrue(run.interrupted)
        self.assertLess(run.summary.steps, 20000)
        with self.assertRaises(strata.InvalidArgument):
            strata.train(resume=run.run_dir, config={"train.lr": 0.1})
        again = strata.train(resume=run.run_dir,
                             overrides={"run.log_level": "warning"})
        self.assertFalse(again.interrupted)
        self.assertEqual(again.run_dir, run.run_dir)
        self.assertEqual(again.summary.steps, 20000)


class ModesTest(unittest.TestCase):
    def test_processes_and_local_and_a_built_in_model(self):
        root = temp_root("modes")
        run = strata.train("mlp", small_config(root, "proc", **{
            "cluster.mode": "sync", "cluster.workers": 2}), processes=True)
        self.assertEqual(run.summary.mode, "sync")
        self.assertGreater(run.summary.final_val_acc, 0.3)
        self.assertEqual(len(run.summary.workers), 2)
        local = strata.train(Mlp(), small_config(root, "local"),
                             cluster__mode="local")
        self.assertGreater(local.summary.samples_per_s, 0)
        self.assertEqual(sorted(local.state_dict()),
                         ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"])
        again = strata.load_run(local.run_dir)
        self.assertEqual(again.summary.final_val_acc,
                         local.summary.final_val_acc)
        self.assertEqual(again.config["cluster.mode"], "local")
        with self.assertRaises(strata.InvalidArgument):
            strata.train("mlp", small_config(root, "bad"), processes=True,
                         cluster__mode="local")


if __name__ == "__main__":
    unittest.main()
