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


def _rows():
    """Each XCCL_PARAM row in the source: (NAME, default, lo, hi), the numbers evaluated."""
    row = re.compile(r'XCCL_PARAM\(\s*\w+\s*,\s*"([A-Z0-9_]+)"\s*,([^;\n]*)\)')
    bounds = {"kKnobMin": -(2 ** 63), "kKnobMax": 2 ** 63 - 1, "::xccl::kKnobMin": -(2 ** 63),
              "::xccl::kKnobMax": 2 ** 63 - 1}
    out = []
    for path in _sources():
        if path.suffix == ".py" or path.name == "param.h" or "tests" in path.parts:
            continue
        for name, args in row.findall(path.read_text(errors="replace")):
            vals = []
            for a in args.split(","):
                a = a.strip().replace("LL", "")
                vals.append(bounds[a] if a in bounds else eval(a, {}))  # C integer expressions
            out.append((name, *vals))
    return out


def _doc_default(doc, knob):
    """The first `...` of the Default cell of knob's row in docs/ENV.md, or None."""
    m = re.search(r"^\| `" + knob + r"` \| ([^|]*)\|", doc, re.M)
    if not m:
        return None
    cell = re.search(r"`([^`]*)`", m.group(1))
    return cell.group(1) if cell else m.group(1).strip()


def test_every_knob_row_has_its_default_in_range_and_in_the_doc():
    rows = _rows()
    assert len(rows) > 30, f"row scan found too little: {rows}"
    doc = (ROOT / "docs" / "ENV.md").read_text()
    wrong = []
    for name, deflt, lo, hi in rows:
        assert lo <= deflt <= hi, f"XCCL_{name}: default {deflt} outside {lo}..{hi}"
        documented = _doc_default(doc, "XCCL_" + name)
        if documented != str(deflt):
            wrong.append(f"XCCL_{name}: the code says {deflt}, docs/ENV.md says {documented}")
    assert not wrong, "\n".join(wrong)


def test_logging_knobs_are_documented():
    # Read by common/log.cc through getenv (before any communicator exists), not XCCL_PARAM.
    doc = (ROOT / "docs" / "ENV.md").read_text()
    for knob in ("XCCL_DEBUG", "XCCL_DEBUG_SUBSYS", "XCCL_DEBUG_FILE"):
        assert f"`{knob}`" in doc
