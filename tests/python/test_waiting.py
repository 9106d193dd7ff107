"""How strata.train waits: Ctrl-C, a second Ctrl-C, a callback's error and
a job that does not end, against a stand-in job (no training)."""
import unittest
from unittest import mock

from strata import training


class StandInJob:
    """wait() raises KeyboardInterrupt on the calls listed in `interrupts`
    and finishes after `finish_after` calls (never when None)."""

    def __init__(self, interrupts=(), finish_after=None):
        self.interrupts = set(interrupts)
        self.finish_after = finish_after
        self.waits = 0
        self.stop_requested = False

    def wait(self, timeout_s):
        self.waits += 1
        if self.waits in self.interrupts:
            raise KeyboardInterrupt
        return self.finish_after is not None and \
            self.waits >= self.finish_after

    def stop(self):
        self.stop_requested = True


class WaitingTest(unittest.TestCase):
    def test_the_first_ctrl_c_stops_and_waits_for_the_end(self):
        job = StandInJob(interrupts=[2], finish_after=5)
        training.wait_for(job)
        self.assertTrue(job.stop_requested)
        self.assertEqual(job.waits, 5)

    def test_a_second_ctrl_c_stops_waiting_at_once(self):
        job = StandInJob(interrupts=[2, 3])
        with self.assertRaises(KeyboardInterrupt):
            training.wait_for(job)
        self.assertEqual(job.waits, 3)

    def test_a_callback_error_stops_the_job_and_the_wait_is_bounded(self):
        class Tail:
            def new_records(self):
                return [{"step": 1}]

        def boom(record):
            raise ValueError("from the callback")

        job = StandInJob()  # never ends
        with mock.patch.object(training, "_STOP_GRACE_S", 0.3), \
                mock.patch.object(training, "_POLL_S", 0.0):
            with self.assertRaises(ValueError):
                training._wait(job, [(Tail(), boom)])
        self.assertTrue(job.stop_requested)
        self.assertGreater(job.waits, 1)


if __name__ == "__main__":
    unittest.main()
