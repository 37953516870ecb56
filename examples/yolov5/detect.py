"""Run a trained YOLOv5 checkpoint on a folder of images (or one image) and save them with
their boxes drawn (and, with --save-txt, YOLO-format label files with confidences).

    python detect.py --weights runs/train/exp/weights/best.pt --source datasets/shapes/images/val --imgsz 128
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from utils.dataloaders import IMG_FORMATS, letterbox  # noqa: E402
from utils.general import increment_path, non_max_suppression, scale_boxes, xyxy2xywh  # noqa: E402
from utils.plots import draw_boxes  # noqa: E402
from utils.torch_utils import select_device  # noqa: E402
from val import load_checkpoint  # noqa: E402


@torch.no_grad()
def run(weights, source, imgsz=640, conf_thres=0.25, iou_thres=0.45, max_det=1000, device="", save_txt=False,
        project=ROOT / "runs/detect", name="exp", exist_ok=False, classes=None, agnostic_nms=False):
    device = select_device(device)
    model, ckpt = load_checkpoint(weights, device)
    names = ckpt.get("names") or model.names
    imgsz = imgsz or int(ckpt.get("opt", {}).get("imgsz") or 640)
    src = Path(source)
    files = sorted(p for p in (src.rglob("*") if src.is_dir() else [src]) if p.suffix.lower() in IMG_FORMATS)
    if not files:
        raise FileNotFoundError(f"no images in {source}")
    save_dir = increment_path(Path(project) / name, exist_ok)
    (save_dir / "labels" if save_txt else save_dir).mkdir(parents=True, exist_ok=True)
    n_boxes = 0
    for f in files:
        with Image.open(f) as im:
            im0 = im.convert("RGB")
        img, _, _ = letterbox(np.asarray(im0), imgsz, scaleup=False)
        x = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))).to(device).float()[None] / 255
        pred = model(x)[0]
        det = non_max_suppression(pred, conf_thres, iou_thres, classes, agnostic_nms, max_det=max_det)[0]
        det[:, :4] = scale_boxes(x.shape[2:], det[:, :4], (im0.height, im0.width)).round()
        n_boxes += len(det)
        counts = {}
        for c in det[:, 5].tolist():
            counts[names[int(c)]] = counts.get(names[int(c)], 0) + 1
        print(f"{f}: {x.shape[2]}x{x.shape[3]} " + (", ".join(f"{v} {k}" for k, v in counts.items()) or "(no detections)"))
        draw_boxes(im0, det, names).save(save_dir / f.name)
        if save_txt:
            wh = torch.tensor([im0.width, im0.height] * 2)
            with open(save_dir / "labels" / (f.stem + ".txt"), "w") as fh:
                for *xyxy, conf, cls in det.tolist():
                    xywh = (xyxy2xywh(torch.tensor(xyxy)) / wh).tolist()
                    fh.write(("%g " * 6).rstrip() % (int(cls), *xywh, conf) + "\n")
    print(f"{len(files)} images, {n_boxes} boxes; results saved to {save_dir}")
    return save_dir


def parse_opt(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", type=str, required=True)
    ap.add_argument("--source", type=str, required=True, help="image file or folder")
    ap.add_argument("--imgsz", "--img", "--img-size", type=int, default=None,
                    help="default: the size the checkpoint was trained at, else 640")
    ap.add_argument("--conf-thres", type=float, default=0.25)
    ap.add_argument("--iou-thres", type=float, default=0.45)
    ap.add_argument("--max-det", type=int, default=1000)
    ap.add_argument("--device", default="")
    ap.add_argument("--save-txt", action="store_true")
    ap.add_argument("--classes", nargs="+", type=int)
    ap.add_argument("--agnostic-nms", action="store_true")
    ap.add_argument("--project", default=str(ROOT / "runs/detect"))
    ap.add_argument("--name", default="exp")
    ap.add_argument("--exist-ok", action="store_true")
    return ap.parse_args(argv)


if __name__ == "__main__":
    o = parse_opt()
    run(o.weights, o.source, o.imgsz, o.conf_thres, o.iou_thres, o.max_det, o.device, o.save_txt, o.project,
        o.name, o.exist_ok, o.classes, o.agnostic_nms)
