"""The layering check (scripts/check_layers.py) passes on the tree and catches what it is for."""
import os
import sys

from harness import REPO

sys.path.insert(0, os.path.join(REPO, "scripts"))
import check_layers  # noqa: E402


def test_the_tree_has_no_wrong_way_include():
    files = [f for f in check_layers.subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
        if check_layers.SOURCE.search(f)]
    problems, edges = check_layers.scan(files)
    assert problems == []
    assert edges[("collectives", "common")] > 10  # the scan does see the includes


def test_a_wrong_way_include_and_a_parent_relative_one_are_refused(tmp_path):
    def put(path, text):
        p = tmp_path / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    put("csrc/collectives/include/xccl.h", "#pragma once\n")
    put("csrc/common/error.h", '#pragma once\n#include "xccl.h"\n')  # common sees the API
    put("csrc/xdev/runtime.cc", '#include "collectives/device/device.h"\n')  # xdev sees libxccl
    put("csrc/collectives/device/device.h", '#pragma once\n#include "common/error.h"\n')  # allowed
    put("csrc/collectives/core/api.cc", '#include "../../common/error.h"\n')
    put("csrc/common/log.h", "#pragma once\n")
    put("csrc/xdev/stream.cc", '#include "common/log.h"\n')  # libxccl's logger in libxdev
    files = ["csrc/common/error.h", "csrc/xdev/runtime.cc", "csrc/collectives/device/device.h",
             "csrc/collectives/core/api.cc", "csrc/xdev/stream.cc"]
    problems, _ = check_layers.scan(files, root=str(tmp_path))
    text = "\n".join(problems)
    assert len(problems) == 4, text
    assert "csrc/common/error.h:2: common includes csrc/collectives/include/xccl.h (api)" in text
    assert "csrc/xdev/runtime.cc:1: xdev includes csrc/collectives/device/device.h (device)" in text
    assert "parent-relative" in text
    assert "csrc/xdev/stream.cc:1: xdev includes csrc/common/log.h: libxccl's logger" in text
