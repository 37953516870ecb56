"""The network plugin seam (include/xccl_net.h, docs/VENDOR.md) through torch: a 4-rank "xccl"
job on two namespace hosts, launched with the seed's command (launcher/two_nodes.sh), whose
pairs across the hosts go through XCCL_NET_PLUGIN: the built-in socket table, and the libfabric
plugin (its tcp;ofi_rxm provider) where the build found libfabric. Ranks of one host still meet
over shared memory; every sum must be right."""
import os
import re

import pytest

import netns
import torch_xccl
from test_launcher_templates import (NO_NETNS, check_hello, finish, job_env, marked, popen,
                                     template)

LIBFABRIC = os.path.join(os.path.dirname(torch_xccl.__file__), "lib", "libxccl-net-libfabric.so")


@pytest.mark.skipif(bool(NO_NETNS), reason=NO_NETNS or "ok")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("plugin", ["socket", "libfabric"])
def test_two_hosts_talk_through_a_network_plugin(plugin):
    if plugin == "libfabric" and not os.path.exists(LIBFABRIC):
        pytest.skip(f"{LIBFABRIC} not built (libfabric-dev missing when torch_xccl was built)")
    with marked() as marker, netns.two_hosts("np" + plugin[0]) as hs:
        env = job_env(marker, XCCL_NET_PLUGIN=plugin, XCCL_DEBUG="INFO",
                      XCCL_DEBUG_SUBSYS="INIT,NET", MASTER_PORT="29653")
        procs = [popen(["bash", template("two_nodes.sh"), str(i), hs[0].addr], env, host=h)
                 for i, h in enumerate(hs)]
        out = finish(procs, timeout=150)
        text = "\n".join(t for _, t in out)
        assert [rc for rc, _ in out] == [0, 0], text[-4000:]
        check_hello(text, 4)
        for r in range(4):
            for p in range(4):
                if p == r:
                    continue
                via = "SHM" if p // 2 == r // 2 else rf"NET \({plugin} network plugin\)"
                assert re.search(rf"rank {r} -> {p} via {via}", text), (r, p, via, text[-4000:])
        # the pairs across the hosts moved their bytes through the plugin
        assert re.search(rf"through the {plugin} network plugin: [1-9]\d* messages sent", text), \
            text[-4000:]
