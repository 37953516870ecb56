"""Detection metrics computed the way pycocotools' COCOeval does for bounding boxes:
detections matched to ground truth per image and class, greedily in decreasing score, each to
the unmatched ground-truth box of highest IoU >= threshold; AP is the mean, over 101 recall
points 0, 0.01, ..., 1, of the interpolated precision (the best precision at any recall >= r);
mAP@0.5:0.95 averages 10 IoU thresholds. Precision and recall are reported at the confidence
that maximises the mean F1 over classes (IoU 0.5), as YOLOv5 prints them."""
import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)


def iou_matrix(a, b):
    """a (N,4), b (M,4) corner boxes as float64 numpy -> (N,M)."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(2)
    area_a = (a[:, 2:] - a[:, :2]).prod(1)
    area_b = (b[:, 2:] - b[:, :2]).prod(1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match_image(det_boxes, det_scores, det_cls, gt_boxes, gt_cls, iouv=IOU_THRESHOLDS, max_det=100):
    """One image. Returns (tp (n, T) bool, scores (n,), cls (n,)) for the detections that count
    (per class, the max_det highest scoring, in decreasing score)."""
    det_boxes, det_scores = np.asarray(det_boxes, np.float64).reshape(-1, 4), np.asarray(det_scores, np.float64)
    det_cls, gt_cls = np.asarray(det_cls).astype(int), np.asarray(gt_cls).astype(int)
    gt_boxes = np.asarray(gt_boxes, np.float64).reshape(-1, 4)
    tps, scores, classes = [], [], []
    for c in np.unique(det_cls):
        di = np.nonzero(det_cls == c)[0]
        di = di[np.argsort(-det_scores[di], kind="mergesort")][:max_det]
        gi = np.nonzero(gt_cls == c)[0]
        tp = np.zeros((len(di), len(iouv)), bool)
        if len(gi):
            ious = iou_matrix(det_boxes[di], gt_boxes[gi])
            thr = np.minimum(iouv, 1 - 1e-10)
            taken = np.zeros((len(iouv), len(gi)), bool)  # per threshold: ground truth matched
            rows = np.arange(len(iouv))
            for k in np.nonzero((ious >= thr[0]).any(1))[0]:  # a det below every threshold is a FP
                cand = np.where(taken, -1.0, ious[k][None, :])  # (T, G)
                g = cand.argmax(1)
                hit = cand[rows, g] >= thr
                taken[rows[hit], g[hit]] = True
                tp[k] = hit
        tps.append(tp)
        scores.append(det_scores[di])
        classes.append(np.full(len(di), c))
    if not tps:
        return np.zeros((0, len(iouv)), bool), np.zeros(0), np.zeros(0, int)
    return np.concatenate(tps), np.concatenate(scores), np.concatenate(classes)


def coco_ap(tp, conf, n_gt):
    """tp (n, T) of one class over all images (concatenated in image order), conf (n,), n_gt > 0.
    Returns AP (T,) with COCO's 101-point interpolated precision, and (recall, precision) curves."""
    order = np.argsort(-conf, kind="mergesort")
    tp = tp[order]
    tpc = np.cumsum(tp, 0).astype(np.float64)
    fpc = np.cumsum(~tp, 0).astype(np.float64)
    ap = np.zeros(tp.shape[1])
    for t in range(tp.shape[1]):
        rc = tpc[:, t] / n_gt
        pr = tpc[:, t] / (tpc[:, t] + fpc[:, t] + np.spacing(1))
        pr = np.maximum.accumulate(pr[::-1])[::-1] if len(pr) else pr  # precision envelope
        q = np.zeros(len(RECALL_POINTS))
        idx = np.searchsorted(rc, RECALL_POINTS, side="left")
        ok = idx < len(pr)
        q[ok] = pr[idx[ok]]
        ap[t] = q.mean()
    return ap, order


def ap_per_class(tp, conf, pred_cls, target_cls, eps=1e-16):
    """tp (n, T), conf (n,), pred_cls (n,) for all images' detections (image order kept),
    target_cls (m,) for all ground truth. Returns p, r, ap (C, T), f1, classes (those with
    ground truth)."""
    tp, conf, pred_cls = np.asarray(tp, bool), np.asarray(conf, np.float64), np.asarray(pred_cls).astype(int)
    target_cls = np.asarray(target_cls).astype(int)
    classes = np.unique(target_cls)
    px = np.linspace(0, 1, 1000)
    ap = np.zeros((len(classes), tp.shape[1] if tp.ndim == 2 else len(IOU_THRESHOLDS)))
    p_curve, r_curve = np.zeros((len(classes), 1000)), np.zeros((len(classes), 1000))
    for ci, c in enumerate(classes):
        sel = pred_cls == c
        n_gt = int((target_cls == c).sum())
        if not sel.any():
            continue
        ap[ci], order = coco_ap(tp[sel], conf[sel], n_gt)
        tpc = np.cumsum(tp[sel][order, 0]).astype(np.float64)
        fpc = np.cumsum(~tp[sel][order, 0]).astype(np.float64)
        cs = conf[sel][order]
        r_curve[ci] = np.interp(-px, -cs, tpc / (n_gt + eps), left=0)
        p_curve[ci] = np.interp(-px, -cs, tpc / (tpc + fpc), left=1)
    f1 = 2 * p_curve * r_curve / (p_curve + r_curve + eps)
    i = int(f1.mean(0).argmax()) if len(classes) else 0
    p, r = p_curve[:, i], r_curve[:, i]
    return p, r, ap, 2 * p * r / (p + r + eps), classes


def evaluate(images, iouv=IOU_THRESHOLDS, max_det=100):
    """images: list of dicts with det_boxes, det_scores, det_cls, gt_boxes, gt_cls (corner
    boxes, any units). Returns dict(mp, mr, map50, map, ap (C,T), classes)."""
    stats = [match_image(im["det_boxes"], im["det_scores"], im["det_cls"], im["gt_boxes"], im["gt_cls"],
                         iouv, max_det) for im in images]
    target_cls = np.concatenate([np.asarray(im["gt_cls"]).astype(int).reshape(-1) for im in images]) \
        if images else np.zeros(0, int)
    if not len(target_cls):
        return dict(mp=0.0, mr=0.0, map50=0.0, map=0.0, ap=np.zeros((0, len(iouv))), classes=np.zeros(0, int))
    tp = np.concatenate([s[0] for s in stats])
    conf = np.concatenate([s[1] for s in stats])
    cls = np.concatenate([s[2] for s in stats])
    p, r, ap, f1, classes = ap_per_class(tp, conf, cls, target_cls)
    return dict(mp=float(p.mean()), mr=float(r.mean()), map50=float(ap[:, 0].mean()),
                map=float(ap.mean()), ap=ap, classes=classes, p=p, r=r)


def fitness(map50, map5095):
    return 0.1 * map50 + 0.9 * map5095
