"""Every environment knob the code reads is documented in docs/ENV.md.

Knobs are declared in C++ with XCCL_PARAM(Name, "NAME", default) (read as XCCL_NAME) and in
the plugin as TORCH_XCCL_* names; this test collects both from the source tree and fails
naming any knob missing from the doc, so the doc cannot fall behind the code.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _sources():
    for sub in ("csrc", "torch_xccl", "tools", "bench"):
        base = ROOT / sub
        if not base.exists():
            continue
        for path in base.rglob("*"):
            if path.suffix in {".cc", ".cpp", ".h", ".hpp", ".py"}:
                yield path


def _declared_knobs():
    knobs = set()
    param = re.compile(r'XCCL_PARAM(?:_STR)?\(\s*\w+\s*,\s*"([A-Z0-9_]+)"')
    torch_knob = re.compile(r"\b(TORCH_XCCL_[A-Z0-9_]+)\b")
    for path in _sources():
        text = path.read_text(errors="replace")
        knobs.update("XCCL_" + name for name in param.findall(text))
        knobs.update(torch_knob.findall(text))
    return knobs


def test_every_declared_knob_is_documented():
    knobs = _declared_knobs()
    assert len(knobs) > 10, f"knob scan found too little: {sorted(knobs)}"
    doc = (ROOT / "docs" / "ENV.md").read_text()
    missing = sorted(k for k in knobs if f"`{k}`" not in doc)
    assert not missing, f"knobs missing from docs/ENV.md: {missing}"


def test_logging_knobs_are_documented():
    # Read by common.cc through getenv (before any communicator exists), not XCCL_PARAM.
    doc = (ROOT / "docs" / "ENV.md").read_text()
    for knob in ("XCCL_DEBUG", "XCCL_DEBUG_SUBSYS", "XCCL_DEBUG_FILE"):
        assert f"`{knob}`" in doc
