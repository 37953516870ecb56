"""Runs PyTorch's own OpenReg device tests against xdev.

PyTorch tests its out-of-tree device support with OpenReg, a reference PrivateUse1 backend
(test/cpp_extensions/open_registration_extension/torch_openreg/tests/*.py in pytorch/pytorch,
BSD-3-Clause). Those tests exercise what any PrivateUse1 device must do (devices, streams,
events, allocators, generators, copies, the fallback, autocast, serialization, the renamed
backend's generated methods). This runner points them at xdev, unchanged otherwise:

* every ``openreg``/``OpenReg``/``OPENREG`` in a test file becomes ``xdev``/``xdev``/``XDEV``
  (device strings, ``torch.openreg``, ``Tensor.is_openreg``, expected messages), and
  ``import torch_openreg`` imports torch_xccl;
* the process has two xdev devices (``XCCL_XDEV_COUNT=2``: OpenReg has two, and the tests
  count them) and xdev is its accelerator from the start (``TORCH_XCCL_ACCELERATOR=xdev``);
* the tests listed in ``skips.py`` are skipped, each with the reason it does not apply to
  xdev (OpenReg's own extension ops, ...) or the documented xdev limit it meets.

The test files are not part of this repository (scripts/openreg_tests.sh fetches them for a
torch release into tests/openreg/upstream/). By default the files about the device itself run
(DEVICE_FILES). Usage::

    python tests/openreg/run_openreg.py DIR [--json OUT] [--all] [-k SUBSTRING]

prints one line per test and a summary; exit status 1 if any test failed or errored.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def point_at_xdev(source: str) -> str:
    source = source.replace("torch_openreg", "torch_xccl")
    for old, new in (("OPENREG", "XDEV"), ("OpenReg", "xdev"), ("openreg", "xdev")):
        source = source.replace(old, new)
    # every test module imports torch_xccl itself (OpenReg relies on torch's autoload of its
    # entry point; spawned children import the module by name and need xdev too)
    return "import torch_xccl  # noqa: F401  (added: registers xdev)\n" + source


# The files about the device itself (run by default). The others test OpenReg's integrations
# with torch.compile/inductor, the profiler, IPC and its own process group, and the OpInfo and
# device-type test generators; xdev has no compiler backend, profiler or IPC, and torch_xccl's
# process group has tests of its own. --all runs every file anyway.
DEVICE_FILES = ("test_autocast", "test_autograd", "test_device", "test_event", "test_memory",
                "test_misc", "test_ops", "test_rng", "test_streams", "test_utils")


def prepare(upstream: str, workdir: str, everything: bool = False) -> list[str]:
    names = []
    for path in sorted(glob.glob(os.path.join(upstream, "test_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if not everything and name not in DEVICE_FILES:
            continue
        with open(path) as f:
            source = f.read()
        with open(os.path.join(workdir, f"{name}.py"), "w") as f:
            f.write(point_at_xdev(source))
        names.append(name)
    return names


class Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, str] = {}

    def _id(self, test) -> str:
        module, cls, method = test.id().rsplit(".", 2)[-3:]
        return f"{module}::{cls}::{method}"

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[self._id(test)] = "passed"

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[self._id(test)] = "failed: " + self._exc_info_to_string(err, test)[-1500:]

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[self._id(test)] = "error: " + self._exc_info_to_string(err, test)[-1500:]

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[self._id(test)] = "skipped: " + reason


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("upstream", help="directory with PyTorch's OpenReg test_*.py files")
    p.add_argument("--json", help="write {test id: outcome} here")
    p.add_argument("-k", default="", help="only tests whose id contains this")
    p.add_argument("--all", action="store_true", help="every test_*.py, not DEVICE_FILES")
    args = p.parse_args(argv)

    os.environ["XCCL_XDEV_COUNT"] = "2"
    os.environ["TORCH_XCCL_ACCELERATOR"] = "xdev"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    workdir = tempfile.mkdtemp(prefix="xdev-openreg-")
    names = prepare(args.upstream, workdir, args.all)
    if not names:
        print(f"no test_*.py in {args.upstream}", file=sys.stderr)
        return 2
    sys.path[:0] = [workdir, HERE, REPO]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [workdir, REPO] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    sys.argv = [sys.argv[0]]  # torch's common_utils reads the command line

    import torch  # noqa: F401
    import torch_xccl  # noqa: F401

    from skips import SKIPS

    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    unknown = set(SKIPS)
    for name in names:
        try:
            module = __import__(name)
        except Exception:
            print(f"{name}: cannot import\n{traceback.format_exc()}", file=sys.stderr)
            return 2
        for attr in dir(module):
            cls = getattr(module, attr)
            if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
                continue
            if cls.__module__ != name:
                continue
            for method in dir(cls):
                if not method.startswith("test"):
                    continue
                key = f"{name}::{cls.__name__}::{method}"
                if key in SKIPS:
                    unknown.discard(key)
                    setattr(cls, method, unittest.skip(SKIPS[key])(getattr(cls, method)))
            for test in loader.loadTestsFromTestCase(cls):
                if args.k in test.id():
                    suite.addTest(test)
    if unknown:
        print(f"skips.py names tests that do not exist here: {sorted(unknown)}", file=sys.stderr)
    t0 = time.monotonic()
    runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=2, stream=sys.stdout)
    result = runner.run(suite)
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for outcome in result.outcomes.values():
        counts[outcome.split(":")[0]] += 1
    print("OPENREG-SUMMARY " + json.dumps({**counts, "seconds": round(time.monotonic() - t0, 1),
                                           "files": names, "unknown_skips": sorted(unknown)}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.outcomes, f, indent=1, sort_keys=True)
    return 0 if counts["failed"] == counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
