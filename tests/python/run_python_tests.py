"""Runs one file of strata's Python tests (tests/python/test_*.py) for ctest.

usage: python3 run_python_tests.py TEST_MODULE
Exits 77 (ctest's skip) saying why when the package cannot be tested here:
no python3-torch, or the strata package was not built (no pybind11-dev).
The package is found on PYTHONPATH (<build>/python, set by ctest).
"""
import os
import sys
import unittest


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: python3-torch is not installed for", sys.executable,
              "(scripts/setup.sh installs it)")
        return 77
    try:
        import strata  # noqa: F401
    except ImportError as e:
        print("skipped: the strata package is not built (pybind11-dev and "
              f"python3-dev, scripts/setup.sh): {e}")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
