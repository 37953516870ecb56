"""Box conversions, IoU, greedy NMS in torch (torchvision is not available beside the pinned torch)."""
import math
import time
from pathlib import Path

import numpy as np
import torch


def xywh2xyxy(x):
    y = x.clone() if isinstance(x, torch.Tensor) else np.copy(x)
    y[..., 0] = x[..., 0] - x[..., 2] / 2
    y[..., 1] = x[..., 1] - x[..., 3] / 2
    y[..., 2] = x[..., 0] + x[..., 2] / 2
    y[..., 3] = x[..., 1] + x[..., 3] / 2
    return y


def xyxy2xywh(x):
    y = x.clone() if isinstance(x, torch.Tensor) else np.copy(x)
    y[..., 0] = (x[..., 0] + x[..., 2]) / 2
    y[..., 1] = (x[..., 1] + x[..., 3]) / 2
    y[..., 2] = x[..., 2] - x[..., 0]
    y[..., 3] = x[..., 3] - x[..., 1]
    return y


def xywhn2xyxy(x, w, h, padw=0, padh=0):
    """Normalised centre boxes to pixel corners (with letterbox padding)."""
    y = np.copy(x)
    y[:, 0] = w * (x[:, 0] - x[:, 2] / 2) + padw
    y[:, 1] = h * (x[:, 1] - x[:, 3] / 2) + padh
    y[:, 2] = w * (x[:, 0] + x[:, 2] / 2) + padw
    y[:, 3] = h * (x[:, 1] + x[:, 3] / 2) + padh
    return y


def xyxy2xywhn(x, w, h):
    y = np.copy(x)
    y[:, 0] = (x[:, 0] + x[:, 2]) / 2 / w
    y[:, 1] = (x[:, 1] + x[:, 3]) / 2 / h
    y[:, 2] = (x[:, 2] - x[:, 0]) / w
    y[:, 3] = (x[:, 3] - x[:, 1]) / h
    return y


def box_iou(a, b, eps=1e-7):
    """Pairwise IoU of corner boxes a (N,4) and b (M,4) -> (N,M)."""
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(0).prod(2)
    area_a = (a[:, 2:] - a[:, :2]).prod(1)
    area_b = (b[:, 2:] - b[:, :2]).prod(1)
    return inter / (area_a[:, None] + area_b[None, :] - inter + eps)


def bbox_iou(box1, box2, xywh=True, CIoU=False, eps=1e-7):
    """Elementwise IoU (or Complete-IoU) of box1 (N,4) and box2 (N,4) -> (N,1)."""
    if xywh:
        (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
        b1x1, b1x2, b1y1, b1y2 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
        b2x1, b2x2, b2y1, b2y2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    else:
        b1x1, b1y1, b1x2, b1y2 = box1.chunk(4, -1)
        b2x1, b2y1, b2x2, b2y2 = box2.chunk(4, -1)
        w1, h1 = b1x2 - b1x1, (b1y2 - b1y1).clamp(eps)
        w2, h2 = b2x2 - b2x1, (b2y2 - b2y1).clamp(eps)
    inter = (torch.min(b1x2, b2x2) - torch.max(b1x1, b2x1)).clamp(0) * \
            (torch.min(b1y2, b2y2) - torch.max(b1y1, b2y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    if not CIoU:
        return iou
    cw = torch.max(b1x2, b2x2) - torch.min(b1x1, b2x1)  # enclosing box
    ch = torch.max(b1y2, b2y2) - torch.min(b1y1, b2y1)
    diag2 = cw ** 2 + ch ** 2 + eps
    centre2 = ((b2x1 + b2x2 - b1x1 - b1x2) ** 2 + (b2y1 + b2y2 - b1y1 - b1y2) ** 2) / 4
    v = (4 / math.pi ** 2) * (torch.atan(w2 / (h2 + eps)) - torch.atan(w1 / (h1 + eps))) ** 2
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (centre2 / diag2 + v * alpha)


def nms(boxes, scores, iou_thres, max_keep=None):
    """Greedy NMS in torch (torchvision is not available beside the pinned torch): repeatedly
    keep the best remaining box and drop those overlapping it by more than iou_thres.
    Returns kept indices (torch.long), best first; stops after max_keep. Runs on CPU tensors
    whatever the model's device (on xdev every small op would be a device round trip): one
    vectorised IoU row per kept box."""
    if boxes.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long)
    scores = scores.detach().cpu()
    order = torch.argsort(scores, descending=True, stable=True)
    b = boxes.detach().cpu().double()[order]
    x1, y1, x2, y2 = b.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    alive = torch.ones(len(b), dtype=torch.bool)
    keep = []
    for i in range(len(b)):
        if not alive[i]:
            continue
        keep.append(i)
        if max_keep and len(keep) >= max_keep:
            break
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp_(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp_(min=0)
        inter = w * h
        alive &= inter / (area[i] + area - inter + 1e-7) <= iou_thres
    return order[torch.tensor(keep, dtype=torch.long)]


def non_max_suppression(prediction, conf_thres=0.25, iou_thres=0.45, classes=None, agnostic=False,
                        multi_label=False, max_det=300, max_nms=30000):
    """prediction (B, N, 5+nc) decoded boxes -> list of (n, 6) [x1, y1, x2, y2, conf, cls] per image.

    conf = objectness x class probability; boxes of different classes do not suppress each
    other unless agnostic; multi_label keeps every class above conf_thres for a box."""
    assert 0 <= conf_thres <= 1 and 0 <= iou_thres <= 1
    prediction = prediction.detach().float().cpu()
    max_wh = 7680  # class offset that separates classes in one NMS pass
    out = []
    for x in prediction:
        x = x[x[:, 4] > conf_thres]
        if not x.shape[0]:
            out.append(torch.zeros((0, 6)))
            continue
        scores = x[:, 5:] * x[:, 4:5]
        box = xywh2xyxy(x[:, :4])
        if multi_label:
            i, j = (scores > conf_thres).nonzero(as_tuple=False).T
            x = torch.cat((box[i], scores[i, j, None], j[:, None].float()), 1)
        else:
            conf, j = scores.max(1, keepdim=True)
            x = torch.cat((box, conf, j.float()), 1)[conf.view(-1) > conf_thres]
        if classes is not None:
            x = x[(x[:, 5:6] == torch.tensor(classes)).any(1)]
        if not x.shape[0]:
            out.append(torch.zeros((0, 6)))
            continue
        x = x[x[:, 4].argsort(descending=True, stable=True)[:max_nms]]
        offset = x[:, 5:6] * (0 if agnostic else max_wh)
        keep = nms(x[:, :4] + offset, x[:, 4], iou_thres, max_keep=max_det)
        out.append(x[keep])
    return out


def scale_boxes(img1_shape, boxes, img0_shape, ratio_pad=None):
    """Letterboxed (img1_shape) corner boxes back to the original image (img0_shape), clipped."""
    if ratio_pad is None:
        gain = min(img1_shape[0] / img0_shape[0], img1_shape[1] / img0_shape[1])
        pad = (img1_shape[1] - img0_shape[1] * gain) / 2, (img1_shape[0] - img0_shape[0] * gain) / 2
    else:
        gain, pad = ratio_pad[0][0], ratio_pad[1]
    boxes[:, [0, 2]] -= pad[0]
    boxes[:, [1, 3]] -= pad[1]
    boxes[:, :4] /= gain
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clamp(0, img0_shape[1])
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clamp(0, img0_shape[0])
    return boxes


class Timer:
    def __init__(self):
        self.t = time.time()

    def lap(self):
        now = time.time()
        dt, self.t = now - self.t, now
        return dt


def increment_path(path, exist_ok=False):
    """runs/train/exp, then exp2, exp3, ... (YOLOv5's run folders); `path` itself when
    exist_ok or when it does not exist yet."""
    path = Path(path)
    if exist_ok or not path.exists():
        return path
    n = 2
    while Path(f"{path}{n}").exists():
        n += 1
    return Path(f"{path}{n}")
