import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the helpers (harness, netns, workers_*) by their plain names
# The repository root, for harness's `from bench.util import ...` however pytest is started
# (`python3 -m pytest` has it first already; a bare `pytest` does not). Appended, so that it
# never shadows an installed torch_xccl.
REPO = os.path.dirname(os.path.dirname(HERE))
if REPO not in sys.path:
    sys.path.append(REPO)
os.environ.setdefault("OMP_NUM_THREADS", "1")
