"""Write a small, learnable YOLO-format detection set: coloured shapes on textured backgrounds.

    python data/make_synthetic.py --out datasets/shapes --train 800 --val 200 --imgsz 128

Layout (what train.py / val.py read, the same as a YOLOv5 dataset):

    OUT/images/train/000000.jpg   OUT/labels/train/000000.txt   (class xc yc w h, normalised)
    OUT/images/val/...            OUT/labels/val/...
    OUT/data.yaml                 (path, train, val, nc, names)

Classes: circle, square, triangle, diamond. Each image has 1-4 objects of 12-45 % of the
image side, any colour, lightly overlapping at most; the background is a colour gradient with
noise, stripes and faint blobs, so colour alone does not tell an object from the background.
Boxes are the exact extent of the drawn shape. Same --seed, same data set.
"""
import argparse
import math
import os
import random

import numpy as np
import yaml
from PIL import Image, ImageDraw, ImageFilter

NAMES = ["circle", "square", "triangle", "diamond"]


def background(rng, s):
    c0, c1 = rng.integers(30, 226, 3), rng.integers(30, 226, 3)
    t = np.linspace(0, 1, s)[:, None, None]
    grad = c0 * (1 - t) + c1 * t
    if rng.random() < 0.5:
        grad = grad.transpose(1, 0, 2)
    img = np.broadcast_to(grad, (s, s, 3)).astype(np.float32)
    img = img + rng.normal(0, rng.uniform(4, 18), (s, s, 3))  # grain
    if rng.random() < 0.5:  # stripes
        period = rng.uniform(6, 24)
        ang = rng.uniform(0, math.pi)
        yy, xx = np.mgrid[0:s, 0:s]
        img += 18 * np.sin((xx * math.cos(ang) + yy * math.sin(ang)) * 2 * math.pi / period)[..., None]
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for _ in range(rng.integers(0, 4)):  # faint blobs: soft distractors, not objects
        x, y, r = rng.uniform(0, s), rng.uniform(0, s), rng.uniform(0.05, 0.2) * s
        col = tuple(int(v) for v in np.clip(np.array(im.getpixel((int(x) % s, int(y) % s))) + rng.integers(-30, 30, 3), 0, 255))
        d.ellipse([x - r, y - r, x + r, y + r * rng.uniform(0.5, 1.5)], fill=col)
    return im.filter(ImageFilter.GaussianBlur(0.6))


def shape_points(cls, cx, cy, r):
    if cls == 2:  # triangle pointing up
        return [(cx, cy - r), (cx + r * 0.94, cy + r * 0.8), (cx - r * 0.94, cy + r * 0.8)]
    if cls == 3:  # diamond
        return [(cx, cy - r), (cx + r * 0.75, cy), (cx, cy + r), (cx - r * 0.75, cy)]
    return None


def box_iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def make_image(rng, s):
    im = background(rng, s)
    d = ImageDraw.Draw(im)
    boxes = []
    for _ in range(rng.integers(1, 5)):
        for _attempt in range(20):
            cls = int(rng.integers(0, len(NAMES)))
            r = rng.uniform(0.06, 0.225) * s  # half-size: 12-45 % of the side
            cx, cy = rng.uniform(r, s - r), rng.uniform(r, s - r)
            if cls == 0:
                box = [cx - r, cy - r, cx + r, cy + r]
            elif cls == 1:
                box = [cx - r * 0.85, cy - r * 0.85, cx + r * 0.85, cy + r * 0.85]
            else:
                pts = shape_points(cls, cx, cy, r)
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                box = [min(xs), min(ys), max(xs), max(ys)]
            if all(box_iou(box, b[1:]) < 0.15 for b in boxes):
                break
        else:
            continue
        bg = np.array(im.resize((1, 1), Image.BILINEAR).getpixel((0, 0)), dtype=float)
        while True:  # a colour that stands out from the background's mean
            col = rng.integers(0, 256, 3)
            if np.abs(col - bg).sum() > 150:
                break
        col = tuple(int(v) for v in col)
        if cls == 0:
            d.ellipse(box, fill=col)
        elif cls == 1:
            d.rectangle(box, fill=col)
        else:
            d.polygon(shape_points(cls, cx, cy, r), fill=col)
        boxes.append([cls] + box)
    return im, boxes


def write_split(out, split, n, s, rng):
    img_dir = os.path.join(out, "images", split)
    lab_dir = os.path.join(out, "labels", split)
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(lab_dir, exist_ok=True)
    for i in range(n):
        im, boxes = make_image(rng, s)
        stem = f"{i:06d}"
        im.save(os.path.join(img_dir, stem + ".jpg"), quality=92)
        with open(os.path.join(lab_dir, stem + ".txt"), "w") as f:
            for cls, x0, y0, x1, y1 in boxes:
                f.write(f"{cls} {(x0 + x1) / 2 / s:.6f} {(y0 + y1) / 2 / s:.6f} "
                        f"{(x1 - x0) / s:.6f} {(y1 - y0) / s:.6f}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=800)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--imgsz", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    random.seed(a.seed)
    write_split(out, "train", a.train, a.imgsz, np.random.default_rng(a.seed))
    write_split(out, "val", a.val, a.imgsz, np.random.default_rng(a.seed + 1_000_003))
    with open(os.path.join(out, "data.yaml"), "w") as f:
        yaml.safe_dump({"path": out, "train": "images/train", "val": "images/val",
                        "nc": len(NAMES), "names": NAMES,
                        "imgsz": a.imgsz},  # train.py/val.py default --imgsz for this set
                       f, sort_keys=False)
    print(f"wrote {a.train} train + {a.val} val images of {a.imgsz}px to {out} (data: {out}/data.yaml)")


if __name__ == "__main__":
    main()
