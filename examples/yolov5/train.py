"""Train YOLOv5 on a YOLO-format data set, on one process or with DDP over torch_xccl.

One process:
    python train.py --data datasets/shapes/data.yaml --cfg yolov5n.yaml --weights '' --imgsz 128 --device cpu
Two processes (DDP, backend "xccl"), as the seed runs it:
    python -m torch.distributed.launch --nproc_per_node 2 train.py --data datasets/shapes/data.yaml \
        --cfg yolov5n.yaml --weights '' --epochs 2 --batch-size 64 --device xdev
Two nodes: the same on each node with --nnodes=2 --node_rank=0|1 --master_addr=A --master_port=2289.
--batch-size is the total over all processes. See README.md.
"""
import argparse
import contextlib
import csv
import datetime
import glob
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import yaml
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim import lr_scheduler

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

try:
    import torch_xccl  # noqa: F401  registers the "xccl" backend and the xdev device
except ImportError:  # CPU/gloo still work without it
    torch_xccl = None

import val as validate  # noqa: E402
from models.yolo import Model, de_parallel, model_summary  # noqa: E402
from utils.dataloaders import create_dataloader  # noqa: E402
from utils.general import increment_path  # noqa: E402
from utils.loss import ComputeLoss  # noqa: E402
from utils.metrics import fitness  # noqa: E402
from utils.plots import plot_results  # noqa: E402
from utils.torch_utils import (ModelEMA, ProgressBar, init_seeds, one_cycle, params_digest,  # noqa: E402
                               select_device, smart_optimizer)

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
RANK = int(os.getenv("RANK", -1))
WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))
CSV_KEYS = ["epoch", "train/box_loss", "train/obj_loss", "train/cls_loss", "metrics/precision", "metrics/recall",
            "metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/box_loss", "val/obj_loss", "val/cls_loss",
            "x/lr0", "x/lr1", "x/lr2", "x/train_img_per_s_per_rank", "x/epoch_train_s"]


def log(*a, **k):
    if RANK in (-1, 0):
        print(*a, **k, flush=True)


def device_mem(device):
    """Reserved device memory as YOLOv5's GPU_mem column shows it ('-' on the CPU)."""
    mod = getattr(torch, device.type, None) if device.type != "cpu" else None
    if mod is None or not hasattr(mod, "memory_reserved"):
        return "-"
    return f"{mod.memory_reserved(device) / 1e9:.3g}G"


def plain(v):
    """opt values as types torch.load(weights_only=True) accepts."""
    return str(v) if isinstance(v, Path) else v


def train(hyp, opt, device):
    save_dir = Path(opt.save_dir)
    wdir = save_dir / "weights"
    last, best = wdir / "last.pt", wdir / "best.pt"
    epochs, batch_size, weights = opt.epochs, opt.batch_size, opt.weights
    main = RANK in (-1, 0)
    if isinstance(hyp, str):
        with open(hyp) as f:
            hyp = yaml.safe_load(f)
    if main:
        wdir.mkdir(parents=True, exist_ok=True)
        with open(save_dir / "hyp.yaml", "w") as f:
            yaml.safe_dump(hyp, f, sort_keys=False)
        with open(save_dir / "opt.yaml", "w") as f:
            yaml.safe_dump({k: plain(v) for k, v in vars(opt).items()}, f, sort_keys=False)
    log("hyperparameters: " + ", ".join(f"{k}={v}" for k, v in hyp.items()))

    data = validate.check_dataset(opt.data)
    nc, names = int(data["nc"]), list(data["names"])
    if not opt.imgsz:  # not given: the data set's own size if its YAML says (make_synthetic.py), else 640
        opt.imgsz = int(data.get("imgsz", 640))

    # Model: the same initial weights on every rank (DDP also broadcasts rank 0's)
    init_seeds(opt.seed)
    ckpt = None
    if str(weights).endswith(".pt"):
        ckpt = torch.load(weights, map_location="cpu", weights_only=True)
        model = Model(opt.cfg or ckpt["yaml"], nc=nc)
        src = ckpt["ema"] if ckpt.get("ema") and not opt.resume else ckpt["model"]
        dst = model.state_dict()
        keep = {k: v for k, v in src.items() if k in dst and v.shape == dst[k].shape}
        model.load_state_dict(keep, strict=False)
        log(f"transferred {len(keep)}/{len(dst)} items from {weights}")
    else:
        model = Model(opt.cfg, nc=nc)
    model.names = names
    model = model.to(device)
    log(model_summary(model))  # GFLOPs at 640, as YOLOv5 prints them
    amp = device.type == "cuda"
    log(f"AMP: {'on' if amp else 'off (' + device.type + ')'}")

    gs = max(int(model.stride.max()), 32)
    imgsz = max(math.ceil(opt.imgsz / gs) * gs, gs * 2)
    if imgsz != opt.imgsz:
        log(f"--imgsz {opt.imgsz} rounded to {imgsz}, a multiple of the max stride {gs}")

    # Optimizer: gradients accumulated up to a nominal batch of 64
    nbs = 64
    accumulate = max(round(nbs / batch_size), 1)
    hyp["weight_decay"] *= batch_size * accumulate / nbs
    optimizer = smart_optimizer(model, opt.optimizer, hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    if opt.cos_lr:
        lf = one_cycle(1, hyp["lrf"], epochs)
    else:
        def lf(x):
            return (1 - x / epochs) * (1.0 - hyp["lrf"]) + hyp["lrf"]
    scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    ema = ModelEMA(model) if main else None

    start_epoch, best_fitness, last_opt_step = 0, 0.0, -1
    if ckpt is not None and opt.resume:
        optimizer.load_state_dict(ckpt["optimizer"])
        best_fitness = ckpt.get("best_fitness", 0.0)
        if ema and ckpt.get("ema"):
            ema.ema.load_state_dict(ckpt["ema"])
            ema.updates = ckpt["updates"]
        start_epoch = ckpt["epoch"] + 1
        last_opt_step = ckpt.get("last_opt_step", -1)
        assert start_epoch < epochs, f"{weights} already trained {epochs} epochs; nothing to resume"
        log(f"resuming from {weights}: epoch {start_epoch} of {epochs}")
        scheduler.last_epoch = start_epoch  # steps taken so far
    del ckpt

    if opt.sync_bn and RANK != -1:
        if device.type == "cpu":
            log("--sync-bn ignored: SyncBatchNorm needs an accelerator device (use --device xdev)")
        else:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
            log("using SyncBatchNorm")

    # Data
    per_rank = batch_size // WORLD_SIZE
    train_loader, dataset = create_dataloader(data["train"], imgsz, per_rank, gs, hyp=hyp, augment=True,
                                              cache=opt.cache, rank=RANK, world_size=WORLD_SIZE,
                                              workers=opt.workers, shuffle=True, seed=opt.seed)
    nb = len(train_loader)
    val_loader = None
    if main:
        val_loader = create_dataloader(data["val"], imgsz, per_rank * 2, gs, cache=opt.cache,
                                       workers=opt.workers)[0]

    if RANK != -1:
        model = DDP(model, device_ids=[LOCAL_RANK] if device.type == "cuda" else None)

    # Loss gains scaled to the number of levels, classes and image size
    nl = de_parallel(model).model[-1].nl
    hyp["box"] *= 3 / nl
    hyp["cls"] *= nc / 80 * 3 / nl
    hyp["obj"] *= (imgsz / 640) ** 2 * 3 / nl
    hyp["label_smoothing"] = opt.label_smoothing
    compute_loss = ComputeLoss(model, hyp)

    nw = max(round(hyp["warmup_epochs"] * nb), hyp.get("warmup_min_iters", 100))
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    log(f"image sizes {imgsz} train, {imgsz} val; {WORLD_SIZE} process(es), {per_rank} images each per step "
        f"(batch {batch_size}, nominal {nbs}: gradients accumulated over up to {accumulate} steps); "
        f"{nb} steps per epoch; backend {dist.get_backend() if RANK != -1 else '-'}; device {device}\n"
        f"logging results to {save_dir}\nstarting training for {epochs} epochs...")
    results = (0, 0, 0, 0, 0, 0, 0)
    t_start = time.time()
    imgs_seen, train_time = 0, 0.0
    for epoch in range(start_epoch, epochs):
        model.train()
        init_seeds(opt.seed + 1 + max(RANK, 0) + 7919 * epoch)  # augmentation: reproducible across resume
        train_loader.sampler.set_epoch(epoch)
        mloss = torch.zeros(3)
        optimizer.zero_grad()
        it = enumerate(train_loader)
        if main:
            it = ProgressBar(it, total=nb)
            log(("\n" + "%11s" * 7) % ("Epoch", "GPU_mem", "box_loss", "obj_loss", "cls_loss", "Instances", "Size"))
        t_ep = time.time()
        n_ep = 0
        for i, (imgs, targets, _paths, _) in it:
            ni = i + nb * epoch
            imgs = imgs.to(device, non_blocking=True).float() / 255
            n_ep += imgs.shape[0]
            if ni <= nw:  # warm-up: accumulation, learning rates and momentum ramp up
                xi = [0, nw]
                accumulate = max(1, int(np.interp(ni, xi, [1, nbs / batch_size]).round()))
                for j, x in enumerate(optimizer.param_groups):
                    x["lr"] = float(np.interp(ni, xi, [hyp["warmup_bias_lr"] if j == 0 else 0.0, x["initial_lr"] * lf(epoch)]))
                    if "momentum" in x:
                        x["momentum"] = float(np.interp(ni, xi, [hyp["warmup_momentum"], hyp["momentum"]]))
            # autocast(enabled=False) on xdev still asks torch.xdev for AMP dtypes, which it lacks
            with torch.autocast(device.type) if amp else contextlib.nullcontext():
                pred = model(imgs)
                loss, loss_items = compute_loss(pred, targets)
                if RANK != -1:
                    loss = loss * WORLD_SIZE  # DDP averages gradients; YOLOv5 sums over the batch
            scaler.scale(loss).backward()
            if ni - last_opt_step >= accumulate:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                if ema:
                    ema.update(model)
                last_opt_step = ni
            if main:
                mloss = (mloss * i + loss_items.cpu()) / (i + 1)
                it.set_description(("%11s" * 2 + "%11.4g" * 5) % (
                    f"{epoch}/{epochs - 1}", device_mem(device), *mloss.tolist(), targets.shape[0], imgs.shape[-1]))
        dt_ep = time.time() - t_ep
        imgs_seen += n_ep
        train_time += dt_ep
        lr = [x["lr"] for x in optimizer.param_groups]
        scheduler.step()

        if main:
            final_epoch = epoch + 1 == epochs or epoch + 1 == opt.stop_after
            if not opt.noval or final_epoch:
                results, _ = validate.run(data, batch_size=per_rank * 2, imgsz=imgsz, model=ema.ema,
                                          dataloader=val_loader, compute_loss=compute_loss, log=log)
            fi = fitness(results[2], results[3])
            if fi > best_fitness:
                best_fitness = fi
            row = [epoch, *mloss.tolist(), *results, *lr, n_ep / dt_ep, dt_ep]
            csv_path = save_dir / "results.csv"
            new = not csv_path.exists()
            with open(csv_path, "a", newline="") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(CSV_KEYS)
                w.writerow([f"{x:.6g}" if isinstance(x, float) else x for x in row])
            stopping = opt.stop_after and epoch + 1 >= opt.stop_after
            if final_epoch or stopping:
                plot_results(csv_path)  # matplotlib takes ~2 s: once, at the end
            if not opt.nosave or final_epoch:
                ckpt = {"epoch": epoch, "best_fitness": best_fitness,
                        "model": {k: v.detach().cpu() for k, v in de_parallel(model).state_dict().items()},
                        "ema": {k: v.detach().cpu() for k, v in ema.ema.state_dict().items()},
                        "updates": ema.updates, "optimizer": optimizer.state_dict(),
                        "last_opt_step": last_opt_step, "yaml": de_parallel(model).yaml, "names": names,
                        "opt": {k: plain(v) for k, v in vars(opt).items()}, "hyp": hyp,
                        "date": datetime.datetime.now().isoformat()}
                torch.save(ckpt, last)
                if best_fitness == fi:
                    torch.save(ckpt, best)
                del ckpt
        if opt.stop_after and epoch + 1 >= opt.stop_after:
            log(f"stopping after epoch {epoch} (--stop-after {opt.stop_after}); continue with --resume {last}")
            break

    total = time.time() - t_start
    s, h = params_digest(model)
    r = max(RANK, 0)
    sys.stdout.write(f"rank {r} final parameter checksum {s:.10f} sha256 {h}\n")
    sys.stdout.flush()
    if main:
        rate = imgs_seen / train_time if train_time else 0.0
        log(f"\n{epoch - start_epoch + 1} epochs completed in {total / 3600:.3f} hours ({total:.1f} s); "
            f"training {rate:.2f} images/s per rank x {WORLD_SIZE} rank(s)")
        log(f"results: P {results[0]:.4f}  R {results[1]:.4f}  mAP@0.5 {results[2]:.4f}  "
            f"mAP@0.5:0.95 {results[3]:.4f}")
        log(f"results saved to {save_dir} (results.csv, results.png, weights/last.pt, weights/best.pt)")
    return results


def parse_opt(argv=None):
    ap = argparse.ArgumentParser(description="Train YOLOv5 (torch_xccl example)")
    ap.add_argument("--weights", type=str, default="", help="initial weights (a train.py .pt) or '' for scratch")
    ap.add_argument("--cfg", type=str, default="", help="model YAML, e.g. yolov5n.yaml (looked up in models/)")
    ap.add_argument("--data", type=str, default="data/coco.yaml", help="data YAML")
    ap.add_argument("--hyp", type=str, default=str(ROOT / "data/hyps/hyp.scratch-low.yaml"))
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=16, help="total over all processes")
    ap.add_argument("--imgsz", "--img", "--img-size", type=int, default=None,
                    help="train/val image size (default: the data YAML's imgsz, else 640)")
    ap.add_argument("--resume", nargs="?", const=True, default=False, help="resume the most recent (or this) run")
    ap.add_argument("--nosave", action="store_true", help="only save the final checkpoint")
    ap.add_argument("--noval", action="store_true", help="only validate after the final epoch")
    ap.add_argument("--cache", action="store_true", help="keep decoded images in RAM")
    ap.add_argument("--device", default="", help="cpu | xdev | 0 or 0,1 (CUDA ids; xdev ids where no CUDA)")
    ap.add_argument("--optimizer", type=str, choices=["SGD", "Adam", "AdamW"], default="SGD")
    ap.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm across DDP ranks")
    ap.add_argument("--workers", type=int, default=8, help="max dataloader workers per rank")
    ap.add_argument("--project", default=str(ROOT / "runs/train"))
    ap.add_argument("--name", default="exp")
    ap.add_argument("--exist-ok", action="store_true")
    ap.add_argument("--cos-lr", action="store_true")
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--local_rank", "--local-rank", type=int, default=-1, help="set by torch.distributed.launch")
    ap.add_argument("--backend", default=os.getenv("YOLO_DIST_BACKEND", "xccl"),
                    help="process-group backend under a launcher (xccl; gloo for comparison, CPU only)")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop after this many epochs, as if interrupted (to try --resume)")
    return ap.parse_args(argv)


def main(opt):
    global LOCAL_RANK
    if LOCAL_RANK == -1 and opt.local_rank != -1:
        LOCAL_RANK = opt.local_rank
    if opt.resume:
        ckpt_path = opt.resume if isinstance(opt.resume, str) else \
            max(glob.glob(f"{opt.project}/**/last.pt", recursive=True), key=os.path.getctime, default="")
        assert ckpt_path and os.path.isfile(ckpt_path), "--resume: no last.pt found"
        saved = torch.load(ckpt_path, map_location="cpu", weights_only=True)["opt"]
        keep = {k: getattr(opt, k) for k in ("device", "local_rank", "workers", "backend", "stop_after")}
        opt = argparse.Namespace(**{**vars(opt), **saved, **keep})
        opt.weights, opt.resume, opt.cfg = ckpt_path, True, ""
    else:
        assert opt.cfg or opt.weights, "either --cfg or --weights must be given"
        opt.save_dir = str(increment_path(Path(opt.project) / opt.name, opt.exist_ok))
    device = select_device(opt.device, LOCAL_RANK)
    if LOCAL_RANK != -1:
        assert opt.batch_size % WORLD_SIZE == 0, f"--batch-size {opt.batch_size} must be a multiple of {WORLD_SIZE}"
        torch.set_num_threads(max(1, int(os.getenv("OMP_NUM_THREADS", "1"))))
        dist.init_process_group(backend=opt.backend, timeout=datetime.timedelta(seconds=3600))
        if RANK == 0:
            ver = f" torch_xccl={torch_xccl.__version__}" if torch_xccl else ""
            print(f"DDP: backend={dist.get_backend()} world_size={dist.get_world_size()} device={device} "
                  f"torch={torch.__version__}{ver}", flush=True)
    try:
        return train(opt.hyp, opt, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_opt())
