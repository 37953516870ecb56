#!/usr/bin/env python3
"""DDP iteration time against bucket_cap_mb, ResNet-style and BERT-style models, xccl vs Gloo,
with the overlap of backward and allreduce measured as the DDP paper does.

The DDP paper (Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", VLDB 2020) sweeps the bucket size of ResNet50 and BERT and shows how much of the
gradient allreduce hides behind the backward pass. This is the same measurement scaled to a
small machine: a narrow CIFAR-style ResNet-18 and a 4-layer BERT-like encoder with an MLM head,
both written here in torch.nn (no torchvision or transformers).

Processes and groups as in bench_ddp.py: the default group is xccl, a Gloo group spans the same
ranks, each rank holds one DDP copy of the model per backend (same weights, same data) and
the two are stepped alternately (the first backend alternates). For every model, DDP copies
for every bucket_cap_mb are built at once (bucket_cap_mb passed explicitly, so DDP's first
bucket is as large as the others) and warmed up (DDP rebuilds its buckets in gradient order
after the first step); then each timed round visits every bucket size (which one goes first
rotates, so a noisy spell of the machine hits all bucket sizes alike) and measures, per
backend:

  c  the DDP step: zero_grad + forward + backward (the bucket allreduces run inside it) and,
     timed apart, the optimizer step; the step time is their sum;
  a  the same forward + backward of a "dry" DDP copy whose communication hook returns the
     bucket untouched: the compute plus DDP's own work (gradients copied into the buckets and
     back out), without any communication;
  b  the allreduce of all gradients alone, outside backward: flat buffers of the sizes of the
     DDP model's own buckets (read from its reducer after the rebuild), issued asynchronously in
     DDP's order and all waited for, after a Gloo barrier.

Every figure is the slowest rank per round, then the median over rounds (the step's
interquartile range is in the JSON and drawn as error bars). As in the paper,
overlap = (a + b - c) / b, c being the DDP step's forward + backward: the share of the
communication hidden behind the backward (1 = all of it, 0 = none; the raw value, which noise
pushes outside [0, 1], is kept in the JSON). c - a is taken within each round (back to back)
and its median is the non-overlapped ("exposed") communication.

On a shared machine a and c (hundreds of ms each) wander by far more than b, so the step's own
timeline gives a second, steadier estimate: hooks record when the last gradient of a backward
is accumulated (DDP launches the last bucket then). The time from that moment on the slowest
rank to the end of backward (all ranks of a host share CLOCK_MONOTONIC), less the same tail of
the dry copy's backward (DDP copying the gradients back out of the buckets), is the exposed
communication ("tail"), and overlap_tl = (b - tail) / b.

The models use forward_sync_buffers=False (torch 2.13's broadcast_buffers=False: the
ResNet's BatchNorm statistics are synced at construction, not in every forward) and no
dropout, so the gradient allreduce is the only communication and the xccl and Gloo models
stay equal: their parameters are compared at the end for every bucket size (a guard that both
backends really averaged the gradients).

With --xccl-device xdev the xccl model lives on the simulated accelerator (rank i on xdev:i,
device_ids=[i]) and every xccl phase is timed to completion (torch.xdev.synchronize() at
each boundary); the Gloo model stays on the cpu.

Usage: python bench/bench_ddp_sweep.py [--buckets 1 2 5 10 25 50 100] [--models resnet bert]
           [--steps 30] [--xccl-device cpu|xdev] [--name NAME] [--plot PATH]
       python bench/bench_ddp_sweep.py --plot-only bench/results/NAME.json [--plot PATH]
"""
import argparse
import datetime
import inspect
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
from bench.bench_ddp import SmallCNN  # noqa: E402
from bench.bench_torch import BACKENDS, init_groups, launch, median, metadata  # noqa: E402

BUCKETS_MB = [1, 2, 5, 10, 25, 50, 100]
# no buffer broadcast in every forward: torch 2.13 calls it forward_sync_buffers=False and warns
# about broadcast_buffers=False, which older releases need
NO_BUFFER_SYNC = ({"forward_sync_buffers": False} if "forward_sync_buffers" in
                  inspect.signature(nn.parallel.DistributedDataParallel).parameters
                  else {"broadcast_buffers": False})


# ----------------------------------------------------------------------------------------------
# models

class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv+BN, identity or 1x1 conv+BN shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class ResNet18(nn.Module):
    """CIFAR-style ResNet-18 (3x3 stem, no max-pool, stages of 2 blocks with widths
    w, 2w, 4w, 8w and strides 1, 2, 2, 2, global average pool, linear). Width 64 is the usual
    11.2M-parameter network; the parameter count scales as width^2."""

    def __init__(self, width=32, num_classes=10):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w),
                                  nn.ReLU())
        blocks, cin = [], w
        for cout, stride in ((w, 1), (2 * w, 2), (4 * w, 2), (8 * w, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


class EncoderLayer(nn.Module):
    """BERT encoder layer (post-LayerNorm): self-attention, then a GELU feed-forward."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)            # B, H, T, D/H
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(B, T, D)))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class TinyBert(nn.Module):
    """BERT-like encoder for masked-language-model pre-training: token + position + segment
    embeddings, LayerNorm, `layers` encoder layers, and BERT's MLM head (dense + GELU +
    LayerNorm, decoder tied to the token embedding) applied at the masked positions only."""

    def __init__(self, vocab=8192, d=256, layers=4, heads=4, seq=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.seg = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.Sequential(*[EncoderLayer(d, heads, 4 * d) for _ in range(layers)])
        self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids, masked):
        """ids: B x T token ids; masked: B x M positions to predict. Returns (B*M) x vocab."""
        B, T = ids.shape
        pos = torch.arange(T, device=ids.device)
        seg = (pos >= T // 2).long()
        x = self.ln(self.tok(ids) + self.pos(pos) + self.seg(seg))
        x = self.layers(x)
        x = torch.gather(x, 1, masked.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        x = self.head(x).reshape(-1, x.shape[-1])
        return F.linear(x, self.tok.weight, self.out_bias)


def make_resnet(a):
    return ResNet18(a.resnet_width)


def data_resnet(a, gen, n):
    return [(torch.randn(a.resnet_batch, 3, 32, 32, generator=gen),
             torch.randint(0, 10, (a.resnet_batch,), generator=gen)) for _ in range(n)]


def make_bert(a):
    return TinyBert(a.bert_vocab, a.bert_hidden, a.bert_layers, a.bert_heads, a.bert_seq)


def data_bert(a, gen, n):
    m = max(1, round(0.15 * a.bert_seq))                      # BERT masks 15% of tokens
    out = []
    for _ in range(n):
        ids = torch.randint(0, a.bert_vocab, (a.bert_batch, a.bert_seq), generator=gen)
        masked = torch.stack([torch.randperm(a.bert_seq, generator=gen)[:m]
                              for _ in range(a.bert_batch)])
        labels = torch.randint(0, a.bert_vocab, (a.bert_batch * m,), generator=gen)
        out.append(((ids, masked), labels))
    return out


def make_cnn(_a):
    return SmallCNN()


def data_cnn(a, gen, n):
    return [(torch.randn(a.cnn_batch, 3, 32, 32, generator=gen),
             torch.randint(0, 10, (a.cnn_batch,), generator=gen)) for _ in range(n)]


# name -> (builder, data maker, description of model and batch)
MODELS = {
    "resnet": (make_resnet, data_resnet,
               lambda a: f"ResNet-18 (CIFAR style, width {a.resnet_width}), 3x32x32 images, "
                         f"10 classes, batch {a.resnet_batch}/rank"),
    "bert": (make_bert, data_bert,
             lambda a: f"BERT-like encoder ({a.bert_layers} layers, hidden {a.bert_hidden}, "
                       f"{a.bert_heads} heads, vocab {a.bert_vocab}), MLM on 15% of "
                       f"{a.bert_seq} tokens, batch {a.bert_batch}/rank"),
    "cnn": (make_cnn, data_cnn,
            lambda a: f"bench_ddp.py's SmallCNN, batch {a.cnn_batch}/rank"),
}


def to_dev(obj, dev):
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_dev(o, dev) for o in obj)
    return obj.to(dev)


def call(model, x):
    return model(*x) if isinstance(x, (tuple, list)) else model(x)


# ----------------------------------------------------------------------------------------------
# the worker

def params_equal(models, gloo):
    """(max |xccl - gloo| over parameters, max difference across ranks), maxed over ranks."""
    diff = max((p1.detach().cpu() - p2.detach().cpu()).abs().max().item() for p1, p2 in
               zip(models["xccl"].parameters(), models["gloo"].parameters()))
    flat = torch.cat([p.detach().cpu().reshape(-1) for p in models["xccl"].parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0, group=gloo)
    e = torch.tensor([diff, (flat - ref).abs().max().item()], dtype=torch.float64)
    dist.all_reduce(e, op=dist.ReduceOp.MAX, group=gloo)
    return e.tolist()


def noop_hook(_state, bucket):
    """DDP communication hook that communicates nothing: the bucket comes back as it went."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


class Setup:
    """One bucket size of one model, per backend: the DDP copy that is trained and timed, its
    optimizer, a "dry" DDP copy with a no-op communication hook (DDP's bucketing work, no
    communication: the compute-alone baseline), and (after the warm-up) buffers shaped as the
    DDP model's buckets."""

    def __init__(self, a, cap, base, build, groups, devices):
        from torch.nn.parallel import DistributedDataParallel as DDP
        self.cap = cap
        self.models, self.opts, self.dry, self.bufs, self.buckets = {}, {}, {}, {}, {}
        self.losses = {b: [] for b in BACKENDS}
        self.steps = 0                                  # DDP steps done (selects the batch)
        for b in BACKENDS:
            ids = [devices[b].index] if devices[b].type == "xdev" else None
            for dry in (False, True):
                m = build(a).to(devices[b])
                m.load_state_dict(base.state_dict())
                ddp = DDP(m, device_ids=ids, process_group=groups[b], bucket_cap_mb=cap,
                          **NO_BUFFER_SYNC)
                if dry:
                    ddp.register_comm_hook(None, noop_hook)
                    self.dry[b] = ddp
                else:
                    self.models[b] = ddp
            self.opts[b] = torch.optim.SGD(self.models[b].parameters(), lr=a.lr, momentum=0.9)
        # when the last gradient of a backward pass was accumulated (the end of the backward
        # compute; DDP launches the last bucket's allreduce at that moment)
        self.last_grad = {}
        for key, ddp in [(b, self.models[b]) for b in BACKENDS] + \
                        [("dry " + b, self.dry[b]) for b in BACKENDS]:
            self.last_grad[key] = 0.0
            for prm in ddp.parameters():
                prm.register_post_accumulate_grad_hook(lambda _p, k=key: self._grad_ready(k))

    def _grad_ready(self, key):
        self.last_grad[key] = max(self.last_grad[key], time.perf_counter())

    def read_buckets(self, devices):
        """After DDP's bucket rebuild (first step): bucket sizes and same-sized buffers."""
        for b in BACKENDS:
            self.buckets[b] = [(g.buffer().numel(), g.buffer().dtype) for g in
                               self.models[b].reducer._get_zeros_like_grad_buckets()]
            self.bufs[b] = [torch.zeros(n, dtype=dt, device=devices[b])
                            for n, dt in self.buckets[b]]


def sweep_worker(rank, world_size, port, q, a):
    try:
        torch.set_num_threads(1)
        groups = init_groups(rank, world_size, port, a.pg_timeout)
        gloo = groups["gloo"]
        devices = {"xccl": torch.device("cpu"), "gloo": torch.device("cpu")}
        if a.xccl_device == "xdev":
            torch.xdev.set_device(rank % torch.xdev.device_count())
            devices["xccl"] = torch.device("xdev", torch.xdev.current_device())

        def sync(b):
            if devices[b].type == "xdev":
                torch.xdev.synchronize()

        out = []
        for mname in a.models:
            t_model = time.perf_counter()
            build, make_data, _ = MODELS[mname]
            torch.manual_seed(a.seed)
            base = build(a)
            nparams = sum(p.numel() for p in base.parameters())
            gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
            cpu_data = make_data(a, gen, a.batches)
            data = {b: [(to_dev(x, devices[b]), y.to(devices[b])) for x, y in cpu_data]
                    for b in BACKENDS}

            def ddp_step(st, b):
                """zero_grad+fwd+bwd, then the optimizer step. Returns (fwdbwd s, opt s, the
                clock when the last gradient was ready, the clock when backward returned)."""
                m, opt = st.models[b], st.opts[b]
                x, y = data[b][st.steps % len(cpu_data)]
                sync(b)
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(call(m, x), y)
                st.last_grad[b] = 0.0
                loss.backward()                # DDP's bucket allreduces run in here
                sync(b)
                t1 = time.perf_counter()
                opt.step()
                sync(b)
                t2 = time.perf_counter()
                st.losses[b].append(loss.item())
                return t1 - t0, t2 - t1, st.last_grad[b], t1

            def compute_step(st, b):
                """zero_grad+fwd+bwd of the dry DDP copy (no-op comm hook), gradients dropped.
                Returns (fwdbwd s, s from the last gradient ready to backward's return)."""
                m = st.dry[b]
                x, y = data[b][st.steps % len(cpu_data)]
                sync(b)
                t0 = time.perf_counter()
                m.zero_grad(set_to_none=True)
                loss = F.cross_entropy(call(m, x), y)
                st.last_grad["dry " + b] = 0.0
                loss.backward()
                sync(b)
                t1 = time.perf_counter()
                m.zero_grad(set_to_none=True)
                return t1 - t0, t1 - st.last_grad["dry " + b]

            def comm_step(st, b):
                """allreduce of buffers sized as DDP's buckets, async in DDP's order, all
                waited for, after a common barrier."""
                dist.barrier(group=gloo)
                sync(b)
                t0 = time.perf_counter()
                works = [dist.all_reduce(t, group=groups[b], async_op=True) for t in st.bufs[b]]
                for w in works:
                    w.wait()
                sync(b)
                return time.perf_counter() - t0

            # every bucket size lives at once and all are stepped in each round, so a noisy
            # spell of the machine hits all bucket sizes (and both backends) alike
            setups = [Setup(a, cap, base, build, groups, devices) for cap in a.buckets]
            dist.barrier(group=gloo)
            for i in range(a.warmup):          # the first step makes DDP rebuild its buckets
                for st in setups:
                    for b in (BACKENDS if i % 2 == 0 else BACKENDS[::-1]):
                        ddp_step(st, b)
                        compute_step(st, b)
                    st.steps += 1
            for st in setups:
                st.read_buckets(devices)
                for b in BACKENDS:
                    comm_step(st, b)
            keys = ("fwdbwd", "opt", "compute", "comm", "tail_dry")
            times = [{b: {k: [] for k in keys} for b in BACKENDS} for _ in setups]
            # absolute clocks (CLOCK_MONOTONIC, one clock for all ranks of a host), maxed over
            # ranks afterwards: backward's end minus the moment the last rank's last gradient
            # was ready = the communication left when the compute was done
            clocks = [{b: {"grads_ready": [], "bwd_end": []} for b in BACKENDS} for _ in setups]
            n = len(setups)
            t_rounds = time.perf_counter()
            for r in range(a.steps):
                # rotate which bucket size goes first; alternate which backend goes first
                for i in [(r + j) % n for j in range(n)]:
                    st, tm = setups[i], times[i]
                    order = BACKENDS if (r + i) % 2 == 0 else BACKENDS[::-1]
                    for b in order:
                        fb, op, ready, end = ddp_step(st, b)
                        tm[b]["fwdbwd"].append(fb)
                        tm[b]["opt"].append(op)
                        clocks[i][b]["grads_ready"].append(ready)
                        clocks[i][b]["bwd_end"].append(end)
                    for b in order:
                        cp, tail = compute_step(st, b)
                        tm[b]["compute"].append(cp)
                        tm[b]["tail_dry"].append(tail)
                    for b in order:
                        tm[b]["comm"].append(comm_step(st, b))
                    st.steps += 1
                if rank == 0 and not a.quiet and (r + 1) % max(1, a.steps // 5) == 0:
                    print(f"  [{mname}] round {r + 1}/{a.steps}, "
                          f"{time.perf_counter() - t_rounds:.0f} s", flush=True)
            for st, tm, ck in zip(setups, times, clocks):
                # slowest rank per round, reduced over gloo after timing
                t = torch.tensor([[tm[b][k] for k in keys] for b in BACKENDS],
                                 dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
                c = torch.tensor([[ck[b]["grads_ready"], ck[b]["bwd_end"]] for b in BACKENDS],
                                 dtype=torch.float64)
                dist.all_reduce(c, op=dist.ReduceOp.MAX, group=gloo)
                diff, rank_diff = params_equal(st.models, gloo)
                if rank != 0:
                    continue
                row = {"model": mname, "bucket_cap_mb": st.cap, "params": nparams,
                       "grad_bytes": nparams * 4,
                       "max_param_diff_xccl_vs_gloo": diff,
                       "max_param_diff_across_ranks": rank_diff,
                       "params_ok": diff < 1e-4 and rank_diff == 0.0}
                for i, b in enumerate(BACKENDS):
                    rounds = {k: [v * 1e3 for v in t[i, j].tolist()] for j, k in enumerate(keys)}
                    rounds["step"] = [f + o for f, o in zip(rounds["fwdbwd"], rounds["opt"])]
                    rounds["tail"] = ((c[i, 1] - c[i, 0]) * 1e3).tolist()
                    s = {k + "_ms": median(v) for k, v in rounds.items()}
                    s["step_ms_min"] = min(rounds["step"])
                    q1, _, q3 = statistics.quantiles(rounds["step"], n=4) \
                        if len(rounds["step"]) > 1 else [s["step_ms"]] * 3
                    s["step_ms_iqr"] = [q1, q3]
                    sizes = [cnt * torch.tensor([], dtype=dt).element_size()
                             for cnt, dt in st.buckets[b]]
                    s["buckets"] = len(sizes)
                    s["bucket_bytes"] = sizes
                    # the DDP paper's overlap, the share of comm hidden behind backward:
                    # (a + b - c) / b, with c - a paired within each round (both measured
                    # back to back, so slow drifts of the machine cancel)
                    s["exposed_comm_ms"] = median([c - a_ for c, a_ in zip(
                        rounds["fwdbwd"], rounds["compute"])])
                    raw = (s["comm_ms"] - s["exposed_comm_ms"]) / s["comm_ms"]
                    s["overlap_raw"] = raw
                    s["overlap"] = min(1.0, max(0.0, raw))
                    # the same from the step's own timeline: the tail of backward after the
                    # last gradient (all ranks), less the tail the dry copy has anyway (DDP
                    # copying the gradients back out of the buckets)
                    s["exposed_tl_ms"] = s["tail_ms"] - s["tail_dry_ms"]
                    raw = (s["comm_ms"] - s["exposed_tl_ms"]) / s["comm_ms"]
                    s["overlap_tl_raw"] = raw
                    s["overlap_tl"] = min(1.0, max(0.0, raw))
                    s["final_loss"] = st.losses[b][-1]
                    s["rounds_ms"] = rounds
                    row[b] = s
                row["ratio_step_xccl_over_gloo"] = row["xccl"]["step_ms"] / row["gloo"]["step_ms"]
                # the two backends' steps of a round run back to back: their ratio per round
                # is less exposed to the machine's slow spells than the ratio of medians
                row["ratio_step_paired"] = median([x / g for x, g in zip(
                    row["xccl"]["rounds_ms"]["step"], row["gloo"]["rounds_ms"]["step"])])
                out.append(row)
            if rank == 0:
                print(f"  [{mname}] done in {time.perf_counter() - t_model:.0f} s", flush=True)
            del setups
            dist.barrier(group=gloo)
        if rank == 0:
            q.put({"world_size": world_size, "rows": out})
        dist.barrier(group=gloo)
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        if rank == 0:
            q.put({"error": traceback.format_exc()})
        raise


# ----------------------------------------------------------------------------------------------
# output

def print_table(res):
    cfg = res["meta"]["config"]
    rows = res["result"]["rows"]
    print(f"\nDDP iteration time vs bucket_cap_mb, {res['result']['world_size']} ranks, xccl model "
          f"on {cfg['xccl_device']}, Gloo on cpu; median of {cfg['steps']} rounds after "
          f"{cfg['warmup']} warm-up steps, slowest rank (run took {res['result']['wall_s']:.0f} s; "
          f"load average {res['meta'].get('loadavg_before', [0])[0]:.1f} before, "
          f"{res['meta'].get('loadavg_after', [0] * 3)[1]:.1f} over the last 5 min after)")
    print("  step: zero_grad+fwd+bwd+opt of the DDP step, ms (q1-q3 in brackets); x/g: xccl step / "
          "Gloo step, ratio of medians\n  and median of the per-round ratios (paired)")
    print("  overlap table, per backend, ms: a = fwd+bwd with a no-op comm hook; b = allreduce "
          "of DDP's buckets alone; c-a = DDP fwd+bwd\n  minus a (paired per round); ovl = "
          "(a+b-c)/b, the "
          "DDP paper's overlap; tail = backward's end after the last gradient\n  of the slowest "
          "rank, less the no-op hook's tail; ovl_tl = (b-tail)/b; overlaps clipped to [0,1], "
          "raw in JSON")
    for mname in dict.fromkeys(r["model"] for r in rows):
        mr = [r for r in rows if r["model"] == mname]
        print(f"\n{mname}: {res['result']['models'][mname]}, {mr[0]['params']:,} params "
              f"({mr[0]['grad_bytes'] / 2**20:.2f} MiB of fp32 gradients)")
        print(f"  {'cap MB':>6} {'bkts':>5} | {'xccl step':>21} | {'gloo step':>21} | "
              f"{'x/g':>5} {'paired':>6} | params")
        for r in mr:
            x, g = r["xccl"], r["gloo"]
            nb = f"{x['buckets']}" if x["buckets"] == g["buckets"] else \
                f"{x['buckets']}/{g['buckets']}"
            st = [f"{s_['step_ms']:7.1f} ({s_['step_ms_iqr'][0]:5.1f}-{s_['step_ms_iqr'][1]:5.1f})"
                  for s_ in (x, g)]
            print(f"  {r['bucket_cap_mb']:6g} {nb:>5} | {st[0]:>21} | {st[1]:>21} | "
                  f"{r['ratio_step_xccl_over_gloo']:5.2f} {r['ratio_step_paired']:6.2f} | "
                  f"{'OK' if r['params_ok'] else 'MISMATCH'}")
        print(f"  {'cap MB':>6} | " + " | ".join(
            f"{b + ' a':>8} {'b':>6} {'c-a':>6} {'ovl':>4} {'tail':>6} {'ovl_tl':>6}"
            for b in BACKENDS))
        for r in mr:
            parts = [f"{s_['compute_ms']:8.1f} {s_['comm_ms']:6.2f} {s_['exposed_comm_ms']:6.1f} "
                     f"{s_['overlap']:4.2f} {s_['exposed_tl_ms']:6.2f} {s_['overlap_tl']:6.2f}"
                     for s_ in (r["xccl"], r["gloo"])]
            print(f"  {r['bucket_cap_mb']:6g} | " + " | ".join(parts))


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = res["result"]["rows"]
    cfg = res["meta"]["config"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    colors = {"xccl": "tab:blue", "gloo": "tab:orange"}
    fig, axes = plt.subplots(2, len(models), figsize=(6.6 * len(models), 9.0), squeeze=False)
    for j, mname in enumerate(models):
        mr = sorted((r for r in rows if r["model"] == mname), key=lambda r: r["bucket_cap_mb"])
        caps = [r["bucket_cap_mb"] for r in mr]
        ax = axes[0, j]
        for b in BACKENDS:
            med = [r[b]["step_ms"] for r in mr]
            iqr = [r[b]["step_ms_iqr"] for r in mr]
            ax.errorbar(caps, med, yerr=[[m - q[0] for m, q in zip(med, iqr)],
                                         [q[1] - m for m, q in zip(med, iqr)]],
                        fmt="-o", color=colors[b], capsize=3, ms=5,
                        label=f"{b}" + (f" ({cfg['xccl_device']})" if b == "xccl" else " (cpu)")
                        + ": DDP step, median and IQR")
            ax.plot(caps, [r[b]["compute_ms"] + r[b]["opt_ms"] for r in mr], ":",
                    color=colors[b], lw=1.5,
                    label=f"{b}: compute alone (fwd+bwd, no-op comm hook; opt)")
        ax.set_xscale("log")
        ax.set_xticks(caps)
        ax.set_xticklabels([f"{c:g}" for c in caps])
        ax.minorticks_off()
        ax.set_xlabel("DDP bucket_cap_mb")
        ax.set_ylabel("iteration time (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{mname}: {mr[0]['params'] / 1e6:.2f}M params, "
                     f"{mr[0]['grad_bytes'] / 2**20:.1f} MiB of gradients")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7.5, loc="lower left")
        # communication per step: hidden behind backward (light) and exposed (dark)
        ax = axes[1, j]
        wdt = 0.38
        for k, b in enumerate(BACKENDS):
            xs = [i + (k - 0.5) * wdt for i in range(len(mr))]
            comm = [r[b]["comm_ms"] for r in mr]
            exposed = [max(0.0, r[b]["exposed_tl_ms"]) for r in mr]
            hidden = [max(0.0, c_ - e) for c_, e in zip(comm, exposed)]
            ax.bar(xs, exposed, wdt, color=colors[b], alpha=1.0)
            ax.bar(xs, hidden, wdt, bottom=exposed, color=colors[b], alpha=0.35)
            ax.bar(xs, comm, wdt, fill=False, edgecolor=colors[b], ls="--", lw=0.9)
            for x_, top, r in zip(xs, [e + h for e, h in zip(exposed, hidden)], mr):
                ax.text(x_, top, f"{100 * r[b]['overlap_tl']:.0f}%\n"
                        f"({100 * r[b]['overlap']:.0f}%)", ha="center", va="bottom",
                        fontsize=6.5, color=colors[b])
        ax.set_xticks(range(len(mr)))
        ax.set_xticklabels([f"{c:g}\n{mr[i]['xccl']['buckets']} bkt" for i, c in
                            enumerate(caps)], fontsize=8)
        ax.set_xlabel("DDP bucket_cap_mb (number of buckets)")
        ax.set_ylabel("gradient allreduce per step (ms)")
        ax.set_ylim(top=ax.get_ylim()[1] * 1.3)
        ax.set_title("dashed: allreduce of all buckets alone (b); dark: exposed (backward's tail "
                     "after the last\ngradient), light: the rest of b, hidden behind backward; "
                     "label: overlap_tl (DDP paper's (a+b-c)/b)", fontsize=8.5)
        ax.legend(handles=[Patch(color=colors[b], label=b) for b in BACKENDS], fontsize=8,
                  loc="upper center", ncol=2)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"DDP over xccl vs Gloo, {res['result']['world_size']} ranks, "
                 f"xccl on {cfg['xccl_device']}, {res['meta']['cpu_count']} CPUs, "
                 f"{cfg['steps']} rounds, {res['meta']['date'][:10]}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--models", nargs="+", default=["resnet", "bert"], choices=list(MODELS))
    p.add_argument("--buckets", type=float, nargs="+", default=BUCKETS_MB,
                   help="bucket_cap_mb values (each passed explicitly to DDP)")
    p.add_argument("--steps", type=int, default=30, help="timed rounds per bucket size")
    p.add_argument("--warmup", type=int, default=3, help="DDP warm-up steps per bucket size")
    p.add_argument("--batches", type=int, default=4, help="distinct input batches, cycled")
    p.add_argument("--resnet-width", type=int, default=32)
    p.add_argument("--resnet-batch", type=int, default=4, help="per rank")
    p.add_argument("--bert-vocab", type=int, default=8192)
    p.add_argument("--bert-hidden", type=int, default=256)
    p.add_argument("--bert-layers", type=int, default=4)
    p.add_argument("--bert-heads", type=int, default=4)
    p.add_argument("--bert-seq", type=int, default=64)
    p.add_argument("--bert-batch", type=int, default=2, help="per rank")
    p.add_argument("--cnn-batch", type=int, default=32, help="per rank")
    p.add_argument("--xccl-device", default="cpu", choices=["cpu", "xdev"],
                   help="where the xccl model lives (the Gloo model is always on the cpu)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600, help="hard timeout for the launch (s)")
    p.add_argument("--pg-timeout", type=float, default=300)
    p.add_argument("--name", default=None, help="result name (default ddp_sweep_<date>)")
    p.add_argument("--json", default=None, help="default bench/results/<name>.json")
    p.add_argument("--plot", default=None, help="PNG (default bench/ddp_sweep.png, "
                   "bench/ddp_sweep_xdev.png with --xccl-device xdev)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--plot-only", default=None, metavar="JSON",
                   help="only print the table and draw the plot of an earlier run")
    a = p.parse_args()

    if a.plot_only:
        with open(a.plot_only) as f:
            res = json.load(f)
        print_table(res)
        dev = res["meta"]["config"]["xccl_device"]
        path = a.plot or os.path.join(util.BENCH, "ddp_sweep.png" if dev == "cpu"
                                      else f"ddp_sweep_{dev}.png")
        plot(res, path)
        print(f"\nwrote {path}")
        return 0

    a.buckets = [int(c) if float(c).is_integer() else c for c in a.buckets]
    name = a.name or "ddp_sweep_" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = util.result_path(a.json, name)
    png = a.plot or os.path.join(util.BENCH, "ddp_sweep.png" if a.xccl_device == "cpu"
                                 else f"ddp_sweep_{a.xccl_device}.png")
    meta = metadata({
        "config": vars(a),
        "models": {m: MODELS[m][2](a) for m in a.models},
        "method": "per model and bucket_cap_mb: fresh DDP models (one on the xccl group, one on "
                  "a gloo group over the same ranks, same weights and data, "
                  "no buffer sync per forward, SGD momentum 0.9), warm-up steps, then rounds; "
                  "each round, per backend (order alternating): DDP step (zero_grad+fwd+bwd "
                  "= c, then opt.step), then fwd+bwd of a DDP copy with a no-op comm hook (= a), "
                  "then the allreduce of "
                  "buffers of DDP's bucket sizes, async then all waited, after a gloo barrier "
                  "(= b). Slowest rank per round; medians over rounds. exposed comm = median "
                  "over rounds of c-a; overlap = (b - exposed)/b = (a+b-c)/b clipped to "
                  "[0,1]. torch.set_num_threads(1) per rank."})
    cpus = meta["cpu_affinity"] or meta["cpu_count"]
    print(f"torch {meta['torch']}, libxccl {meta['libxccl']}, {meta['cpu_count']} CPUs "
          f"({meta['cpu_model']}), {meta['date']}")
    for m in a.models:
        print(f"  {m}: {meta['models'][m]}")
    if a.world_size > cpus:
        print(f"NOTE: {a.world_size} ranks on {cpus} CPUs is oversubscribed.")
    meta["loadavg_before"] = os.getloadavg()
    t0 = time.perf_counter()
    try:
        r = launch(sweep_worker, a.world_size, (a,), a.timeout)
    except RuntimeError as e:
        print(f"FAILED: {e}")
        return 1
    r["wall_s"] = time.perf_counter() - t0
    meta["loadavg_after"] = os.getloadavg()      # 1, 5, 15 min: other work on the machine
    r["oversubscribed"] = a.world_size > cpus
    r["models"] = meta["models"]
    res = {"kind": "ddp_sweep", "meta": meta, "result": r}
    print_table(res)
    ok = all(row["params_ok"] for row in r["rows"])
    r["params_ok"] = ok
    if not ok:
        print("\nPARAMETER MISMATCH between xccl and gloo (or across ranks): timings invalid")
    util.write_json(path, res)
    print(f"\nwrote {path}")
    try:
        plot(res, png)
        print(f"wrote {png}")
    except Exception as e:  # noqa: BLE001
        print(f"plot failed: {e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
