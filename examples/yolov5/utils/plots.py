"""results.png from results.csv, and boxes drawn on images (Pillow)."""
import csv
from pathlib import Path

from PIL import ImageDraw


def plot_results(file="results.csv"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    file = Path(file)
    with open(file) as f:
        rows = list(csv.reader(f))
    head = [h.strip() for h in rows[0]]
    data = [[float(x) for x in r] for r in rows[1:] if r]
    if not data:
        return None
    cols = list(zip(*data))
    keys = ["train/box_loss", "train/obj_loss", "train/cls_loss", "metrics/precision", "metrics/recall",
            "val/box_loss", "val/obj_loss", "val/cls_loss", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95"]
    fig, ax = plt.subplots(2, 5, figsize=(12, 6), tight_layout=True)
    x = cols[head.index("epoch")]
    for a, k in zip(ax.ravel(), keys):
        if k in head:
            a.plot(x, cols[head.index(k)], marker=".", linewidth=2, markersize=8)
        a.set_title(k, fontsize=12)
    out = file.with_suffix(".png")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


COLORS = [(255, 56, 56), (56, 56, 255), (56, 200, 56), (255, 157, 0), (200, 56, 255), (0, 194, 255),
          (255, 112, 200), (120, 120, 0)]


def draw_boxes(img, det, names, line=2):
    """img: PIL image; det: (n, 6) tensor [x1, y1, x2, y2, conf, cls] in img pixels."""
    d = ImageDraw.Draw(img)
    for *xyxy, conf, cls in det.tolist():
        c = COLORS[int(cls) % len(COLORS)]
        d.rectangle(xyxy, outline=c, width=line)
        label = f"{names[int(cls)] if int(cls) < len(names) else int(cls)} {conf:.2f}"
        tw = d.textlength(label)
        y0 = max(xyxy[1] - 11, 0)
        d.rectangle([xyxy[0], y0, xyxy[0] + tw + 2, y0 + 11], fill=c)
        d.text((xyxy[0] + 1, y0), label, fill=(255, 255, 255))
    return img
