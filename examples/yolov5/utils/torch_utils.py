"""Device selection (cpu, xdev, CUDA ids), EMA, optimizer groups, seeds, a rank-0 progress bar."""
import math
import os
import random
import sys
import time
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn

from models.yolo import de_parallel

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
RANK = int(os.getenv("RANK", -1))
WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))


def xdev_available():
    try:
        import torch_xccl  # noqa: F401  registers xdev
        return hasattr(torch, "xdev") and torch.xdev.device_count() > 0
    except Exception:  # noqa: BLE001
        return False


def select_device(device="", local_rank=-1, log=print):
    """'cpu' | 'xdev' | 'xdev:1' | '0' | '0,1' | '' (CUDA if present, else CPU).

    Under a launcher each process takes the device of its local rank: xdev:LOCAL_RANK
    (modulo the xdev count) or cuda:LOCAL_RANK. Numeric ids name CUDA devices; where there is
    no CUDA but the xdev simulator is present, they name xdev devices (as the seed's
    `--device 0,1` names its accelerator's devices)."""
    d = str(device).strip().lower().replace("cuda:", "").replace(" ", "")
    lr = max(local_rank, 0)
    if d == "cpu":
        return torch.device("cpu")
    if d.startswith("xdev") or (d and d[0].isdigit() and not torch.cuda.is_available()):
        if not xdev_available():
            raise RuntimeError(f"--device {device}: no CUDA and no xdev device (import torch_xccl failed?)")
        ids = [int(x) for x in d.split(":", 1)[1].split(",")] if ":" in d else \
            ([int(x) for x in d.split(",")] if d[0].isdigit() else list(range(torch.xdev.device_count())))
        idx = ids[lr % len(ids)] if local_rank != -1 else ids[0]
        torch.xdev.set_device(idx)
        return torch.device("xdev", idx)
    if d and d[0].isdigit() or (d == "" and torch.cuda.is_available()):
        ids = [int(x) for x in d.split(",")] if d else list(range(torch.cuda.device_count()))
        idx = ids[lr % len(ids)] if local_rank != -1 else ids[0]
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def init_seeds(seed=0, deterministic=False):
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


class ModelEMA:
    """Exponential moving average of the weights (and buffers), with a ramped-up decay so
    the early, fast-changing weights are not averaged in for long."""

    def __init__(self, model, decay=0.9999, tau=2000, updates=0):
        self.ema = deepcopy(de_parallel(model)).eval()
        self.updates = updates
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = de_parallel(model).state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v.mul_(d).add_(msd[k].detach(), alpha=1 - d)


def smart_optimizer(model, name="SGD", lr=0.001, momentum=0.9, decay=1e-5):
    """Three groups: biases (no decay), BN weights (no decay), other weights (decay)."""
    g_bias, g_bn, g_w = [], [], []
    bn_types = tuple(v for k, v in nn.__dict__.items() if "Norm" in k)
    for mod in model.modules():
        for pname, p in mod.named_parameters(recurse=False):
            if pname == "bias":
                g_bias.append(p)
            elif pname == "weight" and isinstance(mod, bn_types):
                g_bn.append(p)
            else:
                g_w.append(p)
    if name == "Adam":
        opt = torch.optim.Adam(g_bias, lr=lr, betas=(momentum, 0.999))
    elif name == "AdamW":
        opt = torch.optim.AdamW(g_bias, lr=lr, betas=(momentum, 0.999), weight_decay=0.0)
    elif name == "SGD":
        opt = torch.optim.SGD(g_bias, lr=lr, momentum=momentum, nesterov=True)
    else:
        raise NotImplementedError(f"optimizer {name}")
    opt.add_param_group({"params": g_w, "weight_decay": decay})
    opt.add_param_group({"params": g_bn, "weight_decay": 0.0})
    return opt


def one_cycle(y1=0.0, y2=1.0, steps=100):
    return lambda x: ((1 - math.cos(x * math.pi / steps)) / 2) * (y2 - y1) + y1


def params_digest(model):
    """A float64 sum and a SHA-256 of every parameter: equal on all ranks when DDP kept them in
    sync. (BatchNorm running statistics are buffers, updated by each rank from its own images
    after DDP's last broadcast, so they are left out.)"""
    import hashlib
    h = hashlib.sha256()
    total = 0.0
    for k, v in de_parallel(model).named_parameters():
        t = v.detach().cpu().contiguous()
        h.update(k.encode())
        h.update(t.numpy().tobytes())
        if t.dtype.is_floating_point:
            total += t.double().sum().item()
    return total, h.hexdigest()


class ProgressBar:
    """A dependency-free tqdm look-alike for the rank-0 epoch loop (one line, redrawn)."""

    def __init__(self, iterable, total, desc="", width=24, stream=None, min_interval=0.5):
        self.it, self.total, self.desc, self.width = iterable, total, desc, width
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.n, self.t0, self.last = 0, time.time(), 0.0
        self.min_interval = min_interval

    def set_description(self, desc):
        self.desc = desc

    def __iter__(self):
        for x in self.it:
            yield x
            self.n += 1
            now = time.time()
            if now - self.last >= self.min_interval or self.n == self.total:
                self.last = now
                self._draw(final=self.n == self.total)

    def _draw(self, final=False):
        frac = self.n / max(self.total, 1)
        bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
        el = time.time() - self.t0
        rate = self.n / el if el > 0 else 0
        eta = (self.total - self.n) / rate if rate else 0
        line = f"{self.desc} {frac * 100:3.0f}%|{bar}| {self.n}/{self.total} [{el:.0f}s<{eta:.0f}s, {rate:.2f}it/s]"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        elif final:  # not a terminal (log file, pipe): one line per epoch
            self.stream.write(line + "\n")
        self.stream.flush()
