"""Validate a YOLOv5 checkpoint on a data set's val split: precision, recall, mAP@0.5, mAP@0.5:0.95.

    python val.py --data datasets/shapes/data.yaml --weights runs/train/exp/weights/best.pt --imgsz 128

mAP is computed as pycocotools does (COCO matching, 101-point interpolation; utils/metrics.py).
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models.yolo import Model, de_parallel  # noqa: E402
from utils.dataloaders import create_dataloader  # noqa: E402
from utils.general import non_max_suppression, xywh2xyxy  # noqa: E402
from utils.metrics import evaluate  # noqa: E402
from utils.torch_utils import select_device  # noqa: E402


def check_dataset(data):
    """Read a data YAML; resolve train/val against its `path` (relative paths: to the YAML's
    directory, then to this example's directory, as YOLOv5's ../datasets/coco)."""
    if isinstance(data, dict):
        return data
    data = Path(data)
    if not data.exists() and (ROOT / "data" / data.name).exists():
        data = ROOT / "data" / data.name
    with open(data) as f:
        d = yaml.safe_load(f)
    base = Path(d.get("path") or data.parent)
    if not base.is_absolute():
        cand = [ROOT / base, data.parent / base]  # YOLOv5: relative to the example (../datasets/coco)
        base = next((c for c in cand if c.exists()), cand[0]).resolve()
    for k in ("train", "val", "test"):
        if d.get(k):
            v = d[k]
            d[k] = [str(base / x) for x in v] if isinstance(v, list) else str(base / v)
    d["path"] = str(base)
    if isinstance(d.get("names"), dict):
        d["names"] = [d["names"][i] for i in sorted(d["names"])]
    d.setdefault("names", [str(i) for i in range(d["nc"])])
    return d


def load_checkpoint(weights, device="cpu", ema=True):
    """A model from a train.py checkpoint (its YAML and state dict)."""
    ckpt = torch.load(weights, map_location="cpu", weights_only=True)
    model = Model(ckpt["yaml"])
    sd = ckpt["ema"] if ema and ckpt.get("ema") else ckpt["model"]
    model.load_state_dict(sd)
    model.names = ckpt.get("names", model.names)
    return model.to(device).eval(), ckpt


@torch.no_grad()
def run(data, weights=None, batch_size=32, imgsz=640, conf_thres=0.001, iou_thres=0.6, max_det=300,
        device="", workers=8, model=None, dataloader=None, compute_loss=None, verbose=False, log=print):
    training = model is not None
    if training:
        device = next(model.parameters()).device
    else:
        device = select_device(device)
        model, ckpt = load_checkpoint(weights, device)
        data = check_dataset(data)
        imgsz = imgsz or int(data.get("imgsz") or ckpt.get("opt", {}).get("imgsz") or 640)
    model.eval()
    nc = int(data["nc"])
    names = data.get("names", [str(i) for i in range(nc)])
    if dataloader is None:
        stride = int(de_parallel(model).stride.max())
        dataloader, _ = create_dataloader(data["val"], imgsz, batch_size, stride, workers=workers)
    loss = torch.zeros(3)
    images = []
    t0 = time.time()
    seen = 0
    for im, targets, paths, shapes in dataloader:
        im = im.to(device).float() / 255
        h, w = im.shape[2:]
        preds, train_out = model(im)
        if compute_loss:
            loss += compute_loss(train_out, targets)[1].cpu()
        dets = non_max_suppression(preds, conf_thres, iou_thres, multi_label=True, max_det=max_det)
        for si, det in enumerate(dets):
            lab = targets[targets[:, 0] == si, 1:]
            gt = xywh2xyxy(lab[:, 1:5]) * torch.tensor([w, h, w, h])  # letterboxed pixels
            images.append(dict(det_boxes=det[:, :4].numpy(), det_scores=det[:, 4].numpy(),
                               det_cls=det[:, 5].numpy(), gt_boxes=gt.numpy(), gt_cls=lab[:, 0].numpy()))
            seen += 1
    r = evaluate(images)  # COCO: at most 100 detections per image and class
    n_lab = int(sum(len(x["gt_cls"]) for x in images))
    log(f"{'Class':>12}{'Images':>10}{'Instances':>11}{'P':>9}{'R':>9}{'mAP50':>9}{'mAP50-95':>10}")
    log(f"{'all':>12}{seen:>10}{n_lab:>11}{r['mp']:9.3g}{r['mr']:9.3g}{r['map50']:9.3g}{r['map']:10.3g}")
    if verbose and nc > 1:
        gts = np.concatenate([x["gt_cls"] for x in images]).astype(int) if images else np.zeros(0, int)
        for k, c in enumerate(r["classes"]):
            log(f"{names[c]:>12}{seen:>10}{int((gts == c).sum()):>11}{r['p'][k]:9.3g}{r['r'][k]:9.3g}"
                f"{r['ap'][k, 0]:9.3g}{r['ap'][k].mean():10.3g}")
    dt = time.time() - t0
    if not training:
        log(f"validated {seen} images in {dt:.1f}s")
    model.float()
    return (r["mp"], r["mr"], r["map50"], r["map"], *(loss / max(len(dataloader), 1)).tolist()), r


def parse_opt(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=str, default="data/coco.yaml")
    ap.add_argument("--weights", type=str, required=True)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--imgsz", "--img", "--img-size", type=int, default=None,
                    help="default: the data YAML's imgsz, else the training size, else 640")
    ap.add_argument("--conf-thres", type=float, default=0.001)
    ap.add_argument("--iou-thres", type=float, default=0.6)
    ap.add_argument("--max-det", type=int, default=300)
    ap.add_argument("--device", default="")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--verbose", action="store_true")
    return ap.parse_args(argv)


if __name__ == "__main__":
    o = parse_opt()
    run(o.data, o.weights, o.batch_size, o.imgsz, o.conf_thres, o.iou_thres, o.max_det, o.device, o.workers,
        verbose=o.verbose)
