"""IPv6 (XCCL_SOCKET_FAMILY=AF_INET6): a 4-rank "xccl" job on two namespace hosts that have
only unique-local IPv6 addresses between them besides IPv4, launched with the seed's
command (launcher/two_nodes.sh); the ranks of different hosts connect over IPv6 TCP."""
import re

import pytest

import netns
from test_launcher_templates import (NO_NETNS, check_across, check_hello, finish, job_env,
                                     marked, popen, template)


@pytest.mark.skipif(bool(NO_NETNS), reason=NO_NETNS or "ok")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("store", ["ipv4", "ipv6"])
def test_two_hosts_talk_over_ipv6(store):
    with marked() as marker, netns.two_hosts("6" + store[-1], ipv6=True) as hs:
        env = job_env(marker, XCCL_SOCKET_FAMILY="AF_INET6", XCCL_DEBUG="INFO",
                      XCCL_DEBUG_SUBSYS="INIT,NET", MASTER_PORT="29641")
        master = hs[0].addr6 if store == "ipv6" else hs[0].addr
        procs = [popen(["bash", template("two_nodes.sh"), str(i), master], env, host=h)
                 for i, h in enumerate(hs)]
        out = finish(procs, timeout=150)
        text = "\n".join(t for _, t in out)
        assert [rc for rc, _ in out] == [0, 0], text[-4000:]
        check_hello(text, 4)
        check_across(text, 4, 2, lambda h: f"[{hs[h].addr6}]")
        for i, h in enumerate(hs):
            assert re.search(rf"interface {h.iface} \[{re.escape(h.addr6)}\]:0", text), text[-4000:]
        assert "10.231.0." not in "\n".join(re.findall(r"via TCP \S+", text)), text[-4000:]

