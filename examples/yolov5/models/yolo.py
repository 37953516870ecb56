"""YOLOv5 model built from a YAML description (models/yolov5n.yaml, models/yolov5s.yaml).

    python models/yolo.py --cfg yolov5s.yaml      # prints the layer table and the summary
"""
import argparse
import math
import sys
from copy import deepcopy
from pathlib import Path

import torch
import torch.nn as nn
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models.common import C3, SPPF, Bottleneck, Concat, Conv  # noqa: E402

MODULES = {"Conv": Conv, "C3": C3, "SPPF": SPPF, "Bottleneck": Bottleneck, "Concat": Concat,
           "nn.Upsample": nn.Upsample, "nn.BatchNorm2d": nn.BatchNorm2d}


def round_up(x, divisor=8):
    return int(math.ceil(x / divisor) * divisor)


class Detect(nn.Module):
    """One 1x1 conv per level giving, per anchor, (x, y, w, h, objectness, class scores).

    Training: returns the raw maps, shaped (batch, anchors, ny, nx, 5 + nc).
    Eval: also returns the decoded boxes in input pixels, (batch, n, 5 + nc), sigmoid applied.
    """

    def __init__(self, nc=80, anchors=(), ch=()):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        # anchors are stored in grid units of their level once the strides are known
        self.register_buffer("anchors", torch.tensor(anchors, dtype=torch.float32).view(self.nl, -1, 2))
        self.register_buffer("stride", torch.ones(self.nl))
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        self._grids = {}

    def forward(self, xs):
        xs = list(xs)
        decoded = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            xs[i] = x
            if not self.training:
                grid, anchor_px = self._grid(nx, ny, i, x.device, x.dtype)
                y = x.sigmoid()
                xy = (y[..., :2] * 2 - 0.5 + grid) * self.stride[i]
                wh = (y[..., 2:4] * 2) ** 2 * anchor_px
                decoded.append(torch.cat((xy, wh, y[..., 4:]), -1).view(bs, -1, self.no))
        return xs if self.training else (torch.cat(decoded, 1), xs)

    def _grid(self, nx, ny, i, device, dtype):
        key = (nx, ny, i, str(device), dtype)
        if key not in self._grids:
            yv, xv = torch.meshgrid(torch.arange(ny, dtype=dtype), torch.arange(nx, dtype=dtype), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).to(device)
            anchor_px = (self.anchors[i] * self.stride[i]).view(1, self.na, 1, 1, 2).to(device, dtype)
            self._grids = {k: v for k, v in self._grids.items() if k[2] != i}  # one size per level
            self._grids[key] = (grid, anchor_px)
        return self._grids[key]

    def _apply(self, fn, *args, **kwargs):
        self._grids = {}  # device/dtype moves invalidate the cached grids
        return super()._apply(fn, *args, **kwargs)


def parse_model(d, ch, log=None):
    """Turn the YAML dict into an nn.Sequential of layers, each tagged with .i (index),
    .f (input index or indices) and .type; returns it and the indices whose outputs are kept."""
    nc, gd, gw = d["nc"], d["depth_multiple"], d["width_multiple"]
    anchors = d["anchors"]
    na = len(anchors[0]) // 2 if isinstance(anchors, list) else anchors
    no = na * (nc + 5)
    if log:
        log(f"\n{'':>3}{'from':>18}{'n':>3}{'params':>10}  {'module':<24}{'arguments':<30}")
    layers, save, c2 = [], [], ch[-1]
    for i, (f, n, name, args) in enumerate(d["backbone"] + d["head"]):
        m = MODULES[name] if name != "Detect" else Detect
        args = [nc if a == "nc" else anchors if a == "anchors" else a for a in args]
        n = max(round(n * gd), 1) if n > 1 else n  # depth multiple
        if m in (Conv, C3, SPPF, Bottleneck):
            c1, c2 = ch[f], args[0]
            if c2 != no:
                c2 = round_up(c2 * gw, 8)  # width multiple
            args = [c1, c2, *args[1:]]
            if m is C3:
                args.insert(2, n)  # repeats live inside C3
                n = 1
        elif m is nn.BatchNorm2d:
            args = [ch[f]]
        elif m is Concat:
            c2 = sum(ch[x] for x in f)
        elif m is Detect:
            args.append([ch[x] for x in f])
            if isinstance(args[1], int):  # a count of anchors instead of a list
                args[1] = [list(range(args[1] * 2))] * len(f)
        else:
            c2 = ch[f]
        module = nn.Sequential(*(m(*args) for _ in range(n))) if n > 1 else m(*args)
        module.i, module.f, module.type = i, f, name
        nparams = sum(p.numel() for p in module.parameters())
        if log:
            log(f"{i:>3}{str(f):>18}{n:>3}{nparams:10.0f}  {name:<24}{str(args):<30}")
        save.extend(x % i for x in ([f] if isinstance(f, int) else f) if x != -1)
        layers.append(module)
        if i == 0:
            ch = []
        ch.append(c2)
    return nn.Sequential(*layers), sorted(save)


def resolve_cfg(cfg):
    """A bare name such as 'yolov5n.yaml' or 'yolov5n' resolves to this example's models/."""
    p = Path(cfg)
    if p.suffix == "":
        p = p.with_suffix(".yaml")
    if p.exists():
        return p
    local = ROOT / "models" / p.name
    if local.exists():
        return local
    raise FileNotFoundError(f"model config {cfg} not found (looked in . and {ROOT / 'models'})")


class Model(nn.Module):
    def __init__(self, cfg="yolov5s.yaml", ch=3, nc=None, anchors=None, verbose=False):
        super().__init__()
        if isinstance(cfg, dict):
            self.yaml = deepcopy(cfg)
            self.yaml_file = self.yaml.get("yaml_file", "")
        else:
            path = resolve_cfg(cfg)
            self.yaml_file = path.name
            with open(path) as f:
                self.yaml = yaml.safe_load(f)
            self.yaml["yaml_file"] = path.name
        ch = self.yaml["ch"] = self.yaml.get("ch", ch)
        if nc and nc != self.yaml["nc"]:
            self.yaml["nc"] = nc
        if anchors:
            self.yaml["anchors"] = anchors
        self.model, self.save = parse_model(deepcopy(self.yaml), ch=[ch], log=print if verbose else None)
        self.names = [str(i) for i in range(self.yaml["nc"])]

        det = self.model[-1]
        s = 256  # strides from one forward pass of a dummy image
        with torch.no_grad():
            self.train()  # the Detect head returns only the maps
            outs = self.forward(torch.zeros(1, ch, s, s))
        det.stride.copy_(torch.tensor([s / x.shape[-2] for x in outs]))
        self._order_anchors(det)
        det.anchors /= det.stride.view(-1, 1, 1)
        self.stride = det.stride
        self._init_weights()
        self._init_detect_biases()

    def forward(self, x):
        kept = []
        for m in self.model:
            if m.f != -1:
                x = kept[m.f] if isinstance(m.f, int) else [x if j == -1 else kept[j] for j in m.f]
            x = m(x)
            kept.append(x if m.i in self.save else None)
        return x

    @staticmethod
    def _order_anchors(det):
        """Anchors must grow with the stride; flip them if the YAML lists them the other way."""
        area = det.anchors.prod(-1).mean(-1).view(-1)
        if (area[-1] - area[0]).sign() != (det.stride[-1] - det.stride[0]).sign():
            det.anchors[:] = det.anchors.flip(0)

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eps, m.momentum = 1e-3, 0.03
            elif isinstance(m, nn.SiLU):
                m.inplace = True

    def _init_detect_biases(self):
        """Objectness prior ~8 objects per 640 px image, class prior ~0.6 / nc."""
        det = self.model[-1]
        for conv, s in zip(det.m, det.stride):
            b = conv.bias.view(det.na, -1)
            b.data[:, 4] += math.log(8 / (640 / float(s)) ** 2)
            b.data[:, 5:5 + det.nc] += math.log(0.6 / (det.nc - 0.99999))

    def info(self, imgsz=640, log=print):
        log(model_summary(self, imgsz))


def count_flops(model, imgsz=640):
    """GFLOPs of one forward pass at imgsz (2 x multiply-adds of every conv, as YOLOv5 prints)."""
    total = [0]

    def hook(mod, inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1] * (mod.in_channels // mod.groups)
        total[0] += 2 * out.numel() * k + (out.numel() if mod.bias is not None else 0)

    m = deepcopy(model).float().cpu().eval()
    hooks = [x.register_forward_hook(hook) for x in m.modules() if isinstance(x, nn.Conv2d)]
    s = 64  # measure small, scale to imgsz: every conv is linear in the pixel count
    with torch.no_grad():
        m(torch.zeros(1, m.yaml.get("ch", 3), s, s))
    for h in hooks:
        h.remove()
    return total[0] / 1e9 * (imgsz / s) ** 2


def model_summary(model, imgsz=640):
    n_p = sum(p.numel() for p in model.parameters())
    n_g = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_l = len(list(model.modules()))
    name = Path(getattr(model, "yaml_file", "") or "model").stem.replace("yolov5", "YOLOv5")
    try:
        flops = f", {count_flops(model, imgsz):.1f} GFLOPs"
    except Exception as e:  # noqa: BLE001  summary only
        flops = f" (GFLOPs not measured: {e})"
    return f"{name} summary: {n_l} layers, {n_p} parameters, {n_g} gradients{flops}"


def de_parallel(model):
    return model.module if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) else model


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default="yolov5s.yaml")
    ap.add_argument("--nc", type=int, default=None)
    ap.add_argument("--imgsz", type=int, default=640)
    a = ap.parse_args()
    net = Model(a.cfg, nc=a.nc, verbose=True)
    net.info(a.imgsz)
