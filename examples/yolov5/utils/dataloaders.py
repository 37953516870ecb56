"""YOLO-format datasets: images/ + labels/*.txt (class xc yc w h, normalised), letterbox, the
usual augmentations (HSV, flips, scale/translate/rotate/shear, mosaic), DistributedSampler."""
import glob
import math
import os
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, distributed

from utils.general import xywhn2xyxy, xyxy2xywhn

IMG_FORMATS = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
PIN_MEMORY = str(os.getenv("PIN_MEMORY", "true")).lower() == "true"


def img2label_paths(img_paths):
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return [sb.join(x.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt" for x in img_paths]


def list_images(path):
    """A directory, a glob, a .txt list of images (relative to its parent dir, the COCO layout),
    or a list of these."""
    files = []
    for p in path if isinstance(path, (list, tuple)) else [path]:
        p = Path(p)
        if p.is_dir():
            files += glob.glob(str(p / "**" / "*.*"), recursive=True)
        elif p.is_file():
            parent = str(p.parent) + os.sep
            with open(p) as f:
                for line in f.read().strip().splitlines():
                    line = line.strip()
                    files.append(parent + line[2:] if line.startswith("./") else
                                 (line if os.path.isabs(line) else parent + line))
        else:
            files += glob.glob(str(p))
    files = sorted(x.replace("/", os.sep) for x in files if x.lower().endswith(IMG_FORMATS))
    if not files:
        raise FileNotFoundError(f"no images found in {path}")
    return files


def letterbox(im, new_shape=640, color=114, scaleup=True, stride=32, auto=False):
    """Resize keeping the aspect ratio and pad to new_shape (HWC uint8 numpy).
    Returns the image, (ratio_w, ratio_h), (pad_w, pad_h) per side."""
    h0, w0 = im.shape[:2]
    if isinstance(new_shape, int):
        new_shape = (new_shape, new_shape)
    r = min(new_shape[0] / h0, new_shape[1] / w0)
    if not scaleup:
        r = min(r, 1.0)
    w, h = int(round(w0 * r)), int(round(h0 * r))
    dw, dh = new_shape[1] - w, new_shape[0] - h
    if auto:  # minimum rectangle: pad only to a multiple of the stride
        dw, dh = dw % stride, dh % stride
    if (w, h) != (w0, h0):
        im = np.asarray(Image.fromarray(im).resize((w, h), Image.BILINEAR))
    top, left = dh // 2, dw // 2
    out = np.full((h + dh, w + dw, 3), color, dtype=np.uint8)
    out[top:top + h, left:left + w] = im
    return out, (w / w0, h / h0), (left, top)


def augment_hsv(im, hgain=0.5, sgain=0.5, vgain=0.5):
    """Random hue/saturation/value gains (HWC uint8 RGB numpy), returns a new array."""
    if not (hgain or sgain or vgain):
        return im
    r = np.random.uniform(-1, 1, 3) * [hgain, sgain, vgain] + 1
    hsv = np.asarray(Image.fromarray(im).convert("HSV")).copy()
    x = np.arange(256, dtype=np.float32)
    lut_h = ((x * r[0]) % 256).astype(np.uint8)  # PIL's hue is 0..255
    lut_s = np.clip(x * r[1], 0, 255).astype(np.uint8)
    lut_v = np.clip(x * r[2], 0, 255).astype(np.uint8)
    hsv[..., 0], hsv[..., 1], hsv[..., 2] = lut_h[hsv[..., 0]], lut_s[hsv[..., 1]], lut_v[hsv[..., 2]]
    return np.asarray(Image.fromarray(hsv, "HSV").convert("RGB"))


def random_affine(im, targets, out_size, degrees=0.0, translate=0.1, scale=0.5, shear=0.0, border=(0, 0)):
    """Random rotation/scale/shear/translation about the image centre. targets (n, 5)
    [cls, x1, y1, x2, y2] in pixels. out_size (h, w); border shifts the crop (mosaic)."""
    h_in, w_in = im.shape[:2]
    h, w = out_size
    C = np.eye(3)
    C[0, 2], C[1, 2] = -w_in / 2, -h_in / 2
    R = np.eye(3)
    a = math.radians(random.uniform(-degrees, degrees))
    s = random.uniform(1 - scale, 1 + scale)
    R[:2, :2] = [[s * math.cos(a), -s * math.sin(a)], [s * math.sin(a), s * math.cos(a)]]
    S = np.eye(3)
    S[0, 1] = math.tan(math.radians(random.uniform(-shear, shear)))
    S[1, 0] = math.tan(math.radians(random.uniform(-shear, shear)))
    T = np.eye(3)
    T[0, 2] = random.uniform(0.5 - translate, 0.5 + translate) * w + border[1]
    T[1, 2] = random.uniform(0.5 - translate, 0.5 + translate) * h + border[0]
    M = T @ S @ R @ C
    inv = np.linalg.inv(M)
    out = Image.fromarray(im).transform((w, h), Image.AFFINE, data=tuple(inv[:2].reshape(-1)),
                                        resample=Image.BILINEAR, fillcolor=(114, 114, 114))
    out = np.asarray(out)
    n = len(targets)
    if n:
        xy = np.ones((n * 4, 3))
        xy[:, :2] = targets[:, [1, 2, 3, 4, 1, 4, 3, 2]].reshape(n * 4, 2)  # the 4 corners
        xy = (xy @ M.T)[:, :2].reshape(n, 8)
        x, y = xy[:, [0, 2, 4, 6]], xy[:, [1, 3, 5, 7]]
        new = np.stack((x.min(1), y.min(1), x.max(1), y.max(1)), 1)
        new[:, [0, 2]] = new[:, [0, 2]].clip(0, w)
        new[:, [1, 3]] = new[:, [1, 3]].clip(0, h)
        keep = box_candidates(targets[:, 1:5].T * s, new.T)
        targets = targets[keep]
        targets[:, 1:5] = new[keep]
    return out, targets


def box_candidates(b1, b2, wh_thr=2, ar_thr=20, area_thr=0.1, eps=1e-16):
    """Keep boxes that stay > wh_thr px, keep > area_thr of their (scaled) area, aspect < ar_thr."""
    w1, h1 = b1[2] - b1[0], b1[3] - b1[1]
    w2, h2 = b2[2] - b2[0], b2[3] - b2[1]
    ar = np.maximum(w2 / (h2 + eps), h2 / (w2 + eps))
    return (w2 > wh_thr) & (h2 > wh_thr) & (w2 * h2 / (w1 * h1 + eps) > area_thr) & (ar < ar_thr)


class LoadImagesAndLabels(Dataset):
    def __init__(self, path, img_size=640, batch_size=16, augment=False, hyp=None, cache=False,
                 stride=32, prefix=""):
        self.img_size = img_size
        self.augment = augment
        self.hyp = hyp or {}
        self.stride = stride
        self.im_files = list_images(path)
        self.label_files = img2label_paths(self.im_files)
        self.labels = []
        for lf in self.label_files:
            lb = np.zeros((0, 5), np.float32)
            if os.path.isfile(lf):
                with open(lf) as f:
                    rows = [r.split() for r in f.read().strip().splitlines() if r.strip()]
                if rows:
                    lb = np.array(rows, dtype=np.float32)[:, :5]
            self.labels.append(lb)
        self.mosaic = augment and self.hyp.get("mosaic", 0.0) > 0
        self.ims = [None] * len(self.im_files)
        if cache:  # decoded and resized once, kept in RAM
            for i in range(len(self.im_files)):
                self.ims[i] = self.load_image(i)

    def __len__(self):
        return len(self.im_files)

    def load_image(self, i):
        """Image i as HWC uint8 RGB with its long side = img_size; (h0, w0), (h, w)."""
        if self.ims[i] is not None:
            return self.ims[i]
        with Image.open(self.im_files[i]) as f:
            im = f.convert("RGB")
        w0, h0 = im.size
        r = self.img_size / max(h0, w0)
        if r != 1:
            im = im.resize((max(1, round(w0 * r)), max(1, round(h0 * r))), Image.BILINEAR)
        im = np.asarray(im)
        return im, (h0, w0), im.shape[:2]

    def __getitem__(self, index):
        hyp = self.hyp
        if self.mosaic and random.random() < hyp.get("mosaic", 0.0):
            img, labels = self.load_mosaic(index)
            shapes = None
        else:
            img, (h0, w0), (h, w) = self.load_image(index)
            img, ratio, pad = letterbox(img, self.img_size, scaleup=self.augment)
            shapes = (h0, w0), ((h / h0, w / w0), pad)
            labels = self.labels[index].copy()
            if labels.size:
                labels[:, 1:] = xywhn2xyxy(labels[:, 1:], ratio[0] * w, ratio[1] * h, padw=pad[0], padh=pad[1])
            if self.augment:
                img, labels = random_affine(img, labels, img.shape[:2], hyp.get("degrees", 0), hyp.get("translate", 0),
                                            hyp.get("scale", 0), hyp.get("shear", 0))
        nl = len(labels)
        if nl:
            labels[:, 1:5] = xyxy2xywhn(labels[:, 1:5], img.shape[1], img.shape[0])
        if self.augment:
            img = augment_hsv(img, hyp.get("hsv_h", 0), hyp.get("hsv_s", 0), hyp.get("hsv_v", 0))
            if random.random() < hyp.get("flipud", 0):
                img = np.flipud(img)
                if nl:
                    labels[:, 2] = 1 - labels[:, 2]
            if random.random() < hyp.get("fliplr", 0):
                img = np.fliplr(img)
                if nl:
                    labels[:, 1] = 1 - labels[:, 1]
        out = torch.zeros((nl, 6))
        if nl:
            out[:, 1:] = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.float32))
        img = np.ascontiguousarray(img.transpose(2, 0, 1))  # HWC -> CHW
        return torch.from_numpy(img), out, self.im_files[index], shapes

    def load_mosaic(self, index):
        """Four images around a random centre on a 2s x 2s canvas, then affine-cropped to s."""
        s = self.img_size
        yc, xc = (int(random.uniform(s * 0.5, s * 1.5)) for _ in range(2))
        idx = [index] + random.choices(range(len(self)), k=3)
        canvas = np.full((2 * s, 2 * s, 3), 114, np.uint8)
        all_labels = []
        for k, i in enumerate(idx):
            img, _, (h, w) = self.load_image(i)
            if k == 0:
                x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
                x1b, y1b, x2b, y2b = w - (x2a - x1a), h - (y2a - y1a), w, h
            elif k == 1:
                x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, 2 * s), yc
                x1b, y1b, x2b, y2b = 0, h - (y2a - y1a), min(w, x2a - x1a), h
            elif k == 2:
                x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(2 * s, yc + h)
                x1b, y1b, x2b, y2b = w - (x2a - x1a), 0, w, min(y2a - y1a, h)
            else:
                x1a, y1a, x2a, y2a = xc, yc, min(xc + w, 2 * s), min(2 * s, yc + h)
                x1b, y1b, x2b, y2b = 0, 0, min(w, x2a - x1a), min(y2a - y1a, h)
            canvas[y1a:y2a, x1a:x2a] = img[y1b:y2b, x1b:x2b]
            lb = self.labels[i].copy()
            if lb.size:
                lb[:, 1:] = xywhn2xyxy(lb[:, 1:], w, h, x1a - x1b, y1a - y1b)
            all_labels.append(lb)
        labels = np.concatenate(all_labels, 0)
        labels[:, 1:] = labels[:, 1:].clip(0, 2 * s)
        hyp = self.hyp
        return random_affine(canvas, labels, (s, s), hyp.get("degrees", 0), hyp.get("translate", 0),
                             hyp.get("scale", 0), hyp.get("shear", 0), border=(-s // 2, -s // 2))

    @staticmethod
    def collate_fn(batch):
        """Stack images; labels get their image's index in the batch in column 0."""
        im, label, path, shapes = zip(*batch)
        for i, lb in enumerate(label):
            lb[:, 0] = i
        return torch.stack(im, 0), torch.cat(label, 0), path, shapes


def seed_worker(worker_id):
    seed = torch.initial_seed() % 2 ** 32
    np.random.seed(seed)
    random.seed(seed)


def create_dataloader(path, imgsz, batch_size, stride, hyp=None, augment=False, cache=False, rank=-1,
                      world_size=1, workers=8, shuffle=False, seed=0, prefix=""):
    """batch_size is per process. With shuffle, a DistributedSampler is used even in one
    process, so a 1-process run and an N-process run with the same global batch see the same
    images in each step (rank r takes every N-th image of the shuffled order)."""
    dataset = LoadImagesAndLabels(path, imgsz, batch_size, augment=augment, hyp=hyp, cache=cache,
                                  stride=stride, prefix=prefix)
    batch_size = min(batch_size, len(dataset))
    nw = min(os.cpu_count() // max(world_size, 1), batch_size if batch_size > 1 else 0, workers)
    if shuffle or rank != -1:
        sampler = distributed.DistributedSampler(dataset, num_replicas=max(world_size, 1), rank=max(rank, 0),
                                                 shuffle=shuffle, seed=seed)
    else:
        sampler = None
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, sampler=sampler, num_workers=nw,
                        pin_memory=False, collate_fn=LoadImagesAndLabels.collate_fn,
                        worker_init_fn=seed_worker, persistent_workers=False)
    return loader, dataset
