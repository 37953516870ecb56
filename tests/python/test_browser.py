"""The pages people look at, opened in a real browser: headless Chromium (Debian's `chromium`),
started by the test and driven over the DevTools protocol on a pipe (--remote-debugging-pipe;
Python's standard library only), with no network (its own empty network namespace when run
as root, and every request the page makes is recorded and must be file: or data:).

- The topology page (`xccl-topo show --html`) of a system described here: it renders (a
  screenshot that is not blank and shows the link colours of the legend), its SVG has the
  hosts, devices and links of the description with each link between the right two devices
  in its legend colour, and a mouse moved onto each link (Input.dispatchMouseEvent) hovers
  that link, whose <title> (the tooltip browsers show) names its kind and speed. Headless
  Chromium paints no native tooltip, so the hovered element and its title are what is read.
- The results page (`bench/report.py`): every table of BENCHMARKS.md with its columns, every
  plot of bench/ decoded at its file's size, and a screenshot of the top and of a plot.

Screenshots and the DOM after load go to $XCCL_ARTEFACTS (default build/artefacts/; git
ignores build*/) and their paths are printed. Skipped only where Chromium is not installed
(scripts/setup.sh installs it).
"""
import base64
import collections
import fcntl
import glob
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from harness import REPO
from procs import kill_marked

CHROMIUM = next((p for p in map(shutil.which, ["chromium", "chromium-browser", "google-chrome"]) if p),
                None)
NO_CHROMIUM = "" if CHROMIUM else "chromium not installed (apt-get install chromium)"
ARTEFACTS = os.environ.get("XCCL_ARTEFACTS") or os.path.join(REPO, "build", "artefacts")
WIDTH, HEIGHT = 1200, 900

pytestmark = [pytest.mark.skipif(bool(NO_CHROMIUM), reason=NO_CHROMIUM or "ok"),
              pytest.mark.timeout(120)]  # and every wait on the browser has its own deadline


# ---------------------------------------------------------------- a DevTools client on a pipe

class Chromium:
    """One headless Chromium. Commands go in on its fd 3 and replies and events come out on
    its fd 4, one JSON object each, ended by a NUL byte. Every wait has a deadline."""

    def __init__(self, tmpdir):
        self.marker = uuid.uuid4().hex
        to_r0, to_w = os.pipe()
        from_r, from_w0 = os.pipe()
        # the child's ends, out of the way of 3 and 4 (which its redirections below assign)
        to_r, from_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 20) for fd in (to_r0, from_w0))
        os.close(to_r0)
        os.close(from_w0)
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={tmpdir}/profile", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--mute-audio", "--hide-scrollbars",
                "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
                f"--window-size={WIDTH},{HEIGHT}", "about:blank"]
        self.isolated = os.geteuid() == 0 and shutil.which("unshare") is not None
        if self.isolated:  # a network namespace of its own: no interface but a down loopback
            args = ["unshare", "--net", "--"] + args
        self.log = os.path.join(tmpdir, "chromium.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", f'exec "$@" 3<&{to_r} 4>&{from_w}', "bash"] + args,
                pass_fds=(to_r, from_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, env=dict(os.environ, TEST_BROWSER_MARKER=self.marker))
        os.close(to_r)
        os.close(from_w)
        self.w, self.r = to_w, from_r
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.r], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("no message from chromium in time; log:\n" + self.log_tail())
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe; log:\n" + self.log_tail())
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, session, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == method and m.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read(deadline))

    def open(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.send(f"{domain}.enable", session=sid)
        self.send("Emulation.setDeviceMetricsOverride", {"width": WIDTH, "height": HEIGHT,
                                                         "deviceScaleFactor": 1, "mobile": False}, sid)
        self.send("Page.navigate", {"url": url}, sid)
        self.wait_event("Page.loadEventFired", sid, timeout=60)
        return Page(self, sid)

    def requests(self):
        return [m["params"]["request"]["url"] for m in self.events
                if m.get("method") == "Network.requestWillBeSent"]

    def log_tail(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001  (a browser that will not close is killed below)
            pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            kill_marked("TEST_BROWSER_MARKER", self.marker)  # its helpers, by their marker
            os.close(self.w)
            os.close(self.r)


class Page:
    def __init__(self, browser, session):
        self.b, self.sid = browser, session

    def eval(self, expression):
        r = self.b.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True}, self.sid)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path, clip=None):
        params = {"format": "png"}
        if clip:
            params.update(clip=dict(clip, scale=1), captureBeyondViewport=True)
        data = base64.b64decode(self.b.send("Page.captureScreenshot", params, self.sid)["data"])
        with open(path, "wb") as f:
            f.write(data)
        print(f"artefact: {path}")
        return data

    def move_mouse(self, x, y):
        self.b.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, self.sid)

    def save_dom(self, path):
        with open(path, "w") as f:
            f.write(self.eval("document.documentElement.outerHTML"))
        print(f"artefact: {path}")


@pytest.fixture
def browser(tmp_path):
    b = Chromium(str(tmp_path))
    try:
        yield b
        assert b.proc.poll() is None, "chromium exited early:\n" + b.log_tail()
        outside = [u for u in b.requests() if not u.startswith(("file:", "data:", "about:"))]
        assert outside == [], outside  # nothing fetched from anywhere
    finally:
        b.close()


def artefact(name):
    os.makedirs(ARTEFACTS, exist_ok=True)
    return os.path.join(ARTEFACTS, name)


def colours(png_bytes):
    """Distinct colours of a screenshot (Pillow), and its size."""
    from PIL import Image

    img = Image.open(io.BytesIO(png_bytes)).convert("RGB")
    return collections.Counter({c: n for n, c in img.getcolors(maxcolors=1 << 24)}), img.size


def near(counter, rgb, tol=30):
    """Pixels within tol of rgb on every channel."""
    return sum(n for c, n in counter.items() if all(abs(a - b) <= tol for a, b in zip(c, rgb)))


# ---------------------------------------------------------------- the topology page

TOPO = """system xdev
host alpha numa 1
devices 4 numa 0
nic eth0 numa 0 gbps 25
island 0-1 XL 120
link 1 2 PIX 24
link 2 3 PXB 22
host beta numa 2
devices 2 numa 0
devices 2 numa 1
nic eth1 numa 0 gbps 10
link 0 1 XL 100
link 2 3 NODE 16
"""
# (host, device, device, kind, speed) for every link the page draws (PHB/SYS are not drawn)
LINKS = {("alpha", 0, 1, "XL", "120 GB/s"), ("alpha", 1, 2, "PIX", "24 GB/s"),
         ("alpha", 2, 3, "PXB", "22 GB/s"), ("beta", 0, 1, "XL", "100 GB/s"),
         ("beta", 2, 3, "NODE", "16 GB/s")}

# What the rendered SVG holds: hosts (their boxes and names), devices (circle centres, titles),
# links (ends, stroke colour as computed, title, on-screen middle) and the legend's colours.
SVG_JS = r"""(() => {
  const svg = document.querySelector('svg'), r = svg.getBoundingClientRect();
  const title = e => { const t = e.querySelector(':scope > title'); return t ? t.textContent : null; };
  const rects = [...svg.querySelectorAll(':scope > rect[rx]')].map(e => ({
    x: +e.getAttribute('x'), y: +e.getAttribute('y'), w: +e.getAttribute('width'),
    h: +e.getAttribute('height')}));
  const names = [...svg.querySelectorAll(':scope > text[font-weight=bold]')].map(e => e.textContent);
  const devices = [...svg.querySelectorAll(':scope > circle')].map(e => ({
    x: +e.getAttribute('cx'), y: +e.getAttribute('cy'), title: title(e)}));
  const links = [...svg.querySelectorAll(':scope > line')].filter(e => title(e)).map(e => {
    const b = e.getBoundingClientRect();
    return {x1: +e.getAttribute('x1'), y1: +e.getAttribute('y1'), x2: +e.getAttribute('x2'),
            y2: +e.getAttribute('y2'), title: title(e), stroke: getComputedStyle(e).stroke,
            dashed: e.getAttribute('stroke-dasharray') !== null,
            mid: [b.left + b.width / 2, b.top + b.height / 2]};
  });
  const legend = {};
  for (const k of document.querySelectorAll('span.k'))
    legend[k.nextSibling.textContent.trim().split(' ')[0]] = getComputedStyle(k).backgroundColor;
  return {svg: [r.width, r.height], rects, names, devices, links, legend};
})()"""

HOVERED_JS = r"""(() => {
  const h = [...document.querySelectorAll(':hover')], e = h[h.length - 1];
  const t = e && e.querySelector(':scope > title');
  return e ? {tag: e.tagName, title: t ? t.textContent : null} : null;
})()"""


def rgb(css):
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def show(tmp_path, name, *extra):
    """xccl-topo show --html of the system above; the page's path."""
    topo = tmp_path / "known.topo"
    topo.write_text(TOPO)
    out = tmp_path / name
    r = subprocess.run(["xccl-topo", "show", "--topo-file", str(topo), *extra, "--html", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def devices_of(s):
    """{(x, y): (host, ordinal)} of the drawn devices; every title is 'xdev:N NUMA M'."""
    def host_of(x, y):
        [i] = [i for i, b in enumerate(s["rects"])
               if b["x"] <= x <= b["x"] + b["w"] and b["y"] <= y <= b["y"] + b["h"]]
        return s["names"][i]

    where = {}
    for d in s["devices"]:
        m = re.fullmatch(r"xdev:(\d) NUMA (\d)", d["title"] or "")
        assert m, d
        where[(d["x"], d["y"])] = (host_of(d["x"], d["y"]), int(m.group(1)))
    return where


def test_topology_page_in_chromium(browser, tmp_path):
    """The page of `xccl-topo show --html` (no ranks: links only, so each is free to hover)."""
    page = browser.open(show(tmp_path, "topology.html").as_uri())
    page.save_dom(artefact("topology.dom.html"))
    seen, size = colours(page.screenshot(artefact("topology.png")))
    assert size == (WIDTH, HEIGHT)
    assert len(seen) >= 16, f"a nearly blank screenshot: {len(seen)} colours"

    s = page.eval(SVG_JS)
    assert s["svg"][0] > 0 and s["svg"][1] > 0, s["svg"]
    assert s["names"] == ["alpha", "beta"] and len(s["rects"]) == 2, s
    where = devices_of(s)
    assert sorted(where.values()) == [(h, i) for h in ("alpha", "beta") for i in range(4)], where

    drawn = set()
    for ln in s["links"]:
        (h1, a), (h2, b) = where[(ln["x1"], ln["y1"])], where[(ln["x2"], ln["y2"])]
        kind, speed = ln["title"].split(" ", 1)
        assert h1 == h2, ln
        drawn.add((h1, min(a, b), max(a, b), kind, speed))
        assert ln["stroke"] == s["legend"][kind], (ln, s["legend"])  # the legend's colour
    assert drawn == LINKS and len(s["links"]) == len(LINKS), drawn ^ LINKS

    for kind in {k for *_, k, _ in LINKS}:  # each kind's colour is on screen, not just in the DOM
        assert near(seen, rgb(s["legend"][kind]), tol=12) > 20, (kind, s["legend"][kind])

    for ln in s["links"]:  # the pointer on a link hovers that link; its title says kind and speed
        page.move_mouse(*ln["mid"])
        hovered = page.eval(HOVERED_JS)
        assert hovered == {"tag": "line", "title": ln["title"]}, (ln, hovered)
        assert re.fullmatch(r"(XL|PIX|PXB|NODE) \d+ GB/s", hovered["title"]), hovered
    (x, y), device = next(iter(where.items()))
    left, top = page.eval("(() => { const r = document.querySelector('svg').getBoundingClientRect();"
                          " return [r.left, r.top]; })()")
    page.move_mouse(left + x, top + y - 13)  # inside the circle, above its label
    hovered = page.eval(HOVERED_JS)
    assert hovered["tag"] == "circle" and hovered["title"].startswith(f"xdev:{device[1]} "), hovered
    page.screenshot(artefact("topology_hover.png"))


def test_topology_page_with_ring_in_chromium(browser, tmp_path):
    """With --nranks 8 (4 ranks a host): ring 0 drawn as 8 arrows, rank r's device to rank
    r + 1's, across the hosts from alpha's last to beta's first and back."""
    page = browser.open(show(tmp_path, "topology_ring.html", "--nranks", "8").as_uri())
    seen, _ = colours(page.screenshot(artefact("topology_ring.png")))
    assert near(seen, (0x6A, 0x3D, 0x9A), tol=12) > 50  # the arrows' purple is painted
    s = page.eval(SVG_JS)
    where = devices_of(s)
    rank_at = {pos: (0 if h == "alpha" else 4) + i for pos, (h, i) in where.items()}

    def rank_near(x, y):
        """The rank whose device is within 10 px: an arrow runs 8 px beside the link it follows."""
        [r] = [r for (px, py), r in rank_at.items() if (px - x) ** 2 + (py - y) ** 2 <= 100]
        return r

    steps = sorted((int(m.group(1)), rank_near(ln["x1"], ln["y1"]), rank_near(ln["x2"], ln["y2"]))
                   for ln in s["links"] for m in [re.match(r"ring step (\d+): ", ln["title"])] if m)
    assert steps == [(k, k, (k + 1) % 8) for k in range(8)], steps
    assert all(ln["dashed"] for ln in s["links"] if ln["title"].startswith("ring step"))
    # With the ring drawn, the pointer still reaches every link (kind and speed) and every
    # arrow (its step): neither covers the other. An arrow is dashed (6 on, 4 off), so it is
    # pointed at 3 px into the dash nearest its middle.
    left, top = page.eval("(() => { const r = document.querySelector('svg').getBoundingClientRect();"
                          " return [r.left, r.top]; })()")
    for ln in s["links"]:
        if ln["dashed"]:
            dx, dy = ln["x2"] - ln["x1"], ln["y2"] - ln["y1"]
            length = (dx * dx + dy * dy) ** 0.5
            t = ((length / 2) // 10 * 10 + 3) / length
            point = (left + ln["x1"] + t * dx, top + ln["y1"] + t * dy)
        else:
            point = ln["mid"]
        page.move_mouse(*point)
        assert page.eval(HOVERED_JS) == {"tag": "line", "title": ln["title"]}, ln


# ---------------------------------------------------------------- the results page

def markdown_tables(path):
    """Column counts of the markdown tables (header before a |---| row, outside ``` fences)."""
    counts, fenced, prev = [], False, ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"\s*\|(\s*:?-{3,}:?\s*\|)+\s*$", line) and prev.lstrip().startswith("|"):
                counts.append(len(re.split(r"(?<!\\)\|", prev.strip().strip("|"))))
            prev = line
    return counts


IMAGES_JS = r"""Promise.all([...document.images].map(i => i.decode().then(
  () => ({src: i.getAttribute('data-src'), w: i.naturalWidth, h: i.naturalHeight,
          shown: i.getBoundingClientRect().width}),
  () => ({src: i.getAttribute('data-src'), w: 0, h: 0, shown: 0}))))"""

TABLES_JS = r"""[...document.querySelectorAll('table')].map(t => ({
  cols: t.querySelectorAll('thead th').length, rows: t.querySelectorAll('tbody tr').length,
  height: t.getBoundingClientRect().height}))"""


def test_results_page_in_chromium(browser, tmp_path):
    from PIL import Image

    out = tmp_path / "report.html"
    r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "report.py"), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    shutil.copy(out, artefact("report.html"))
    print(f"artefact: {artefact('report.html')}")
    want_cols = markdown_tables(os.path.join(REPO, "BENCHMARKS.md"))
    pngs = sorted(glob.glob(os.path.join(REPO, "bench", "*.png")))
    assert want_cols and pngs

    page = browser.open(out.as_uri())
    tables = page.eval(TABLES_JS)
    assert [t["cols"] for t in tables] == want_cols
    assert all(t["rows"] > 0 and t["height"] > 20 for t in tables), tables
    images = page.eval(IMAGES_JS)
    want = {os.path.relpath(p, REPO): Image.open(p).size for p in pngs}
    assert {i["src"]: (i["w"], i["h"]) for i in images} == want, images  # decoded at full size
    assert len(images) == len(want) and all(i["shown"] > 100 for i in images), images

    top, size = colours(page.screenshot(artefact("report_top.png")))
    assert size == (WIDTH, HEIGHT) and len(top) >= 16, len(top)
    assert near(top, (0xE8, 0xEE, 0xF7), tol=2) > 500  # table header shading is painted
    rect = page.eval("(() => { const r = document.images[0].getBoundingClientRect();"
                     " return {x: r.left + scrollX, y: r.top + scrollY, width: r.width,"
                     " height: r.height}; })()")
    plot, psize = colours(page.screenshot(artefact("report_plot.png"), clip=rect))
    assert psize[0] > 100 and psize[1] > 100 and len(plot) >= 16, (psize, len(plot))
