"""YOLOv5 loss: CIoU box regression, objectness (BCE against the predicted box's IoU) and class
BCE, with YOLOv5's anchor matching (a target is assigned to every anchor whose shape ratio is
within anchor_t, in its own grid cell and in the two neighbouring cells nearest its centre)."""
import torch
import torch.nn as nn

from models.yolo import de_parallel
from utils.general import bbox_iou


def smooth_bce(eps=0.0):
    return 1.0 - 0.5 * eps, 0.5 * eps


class ComputeLoss:
    def __init__(self, model, hyp):
        det = de_parallel(model).model[-1]
        dev = next(model.parameters()).device
        self.device = dev
        self.hyp = hyp
        self.bce_cls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["cls_pw"]], device=dev))
        self.bce_obj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["obj_pw"]], device=dev))
        self.cp, self.cn = smooth_bce(hyp.get("label_smoothing", 0.0))
        self.balance = {3: [4.0, 1.0, 0.4]}.get(det.nl, [4.0, 1.0, 0.25, 0.06, 0.02])  # P3..P5 weights
        self.na, self.nc, self.nl = det.na, det.nc, det.nl
        self.anchors = det.anchors.detach().cpu()  # grid units, (nl, na, 2)

    def __call__(self, preds, targets):
        """preds: list of (B, na, ny, nx, 5+nc) maps; targets: (n, 6) [image, class, x, y, w, h]
        normalised. Returns (total loss x batch size, tensor[box, obj, cls] detached)."""
        dev = preds[0].device
        lcls = torch.zeros(1, device=dev)
        lbox = torch.zeros(1, device=dev)
        lobj = torch.zeros(1, device=dev)
        tcls, tbox, indices, anch = self.build_targets(preds, targets.detach().float().cpu())
        for i, pi in enumerate(preds):
            b, a, gj, gi = (x.to(dev) for x in indices[i])
            tobj = torch.zeros(pi.shape[:4], dtype=pi.dtype, device=dev)
            n = b.shape[0]
            if n:
                pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, self.nc), 1)
                pxy = pxy.sigmoid() * 2 - 0.5
                pwh = (pwh.sigmoid() * 2) ** 2 * anch[i].to(dev)
                iou = bbox_iou(torch.cat((pxy, pwh), 1), tbox[i].to(dev), CIoU=True).squeeze(1)
                lbox = lbox + (1.0 - iou).mean()
                tobj[b, a, gj, gi] = iou.detach().clamp(0).to(tobj.dtype)
                if self.nc > 1:
                    t = torch.full_like(pcls, self.cn)
                    t[torch.arange(n, device=dev), tcls[i].to(dev)] = self.cp
                    lcls = lcls + self.bce_cls(pcls, t)
            lobj = lobj + self.bce_obj(pi[..., 4], tobj) * self.balance[i]
        lbox = lbox * self.hyp["box"]
        lobj = lobj * self.hyp["obj"]
        lcls = lcls * self.hyp["cls"]
        bs = preds[0].shape[0]
        return (lbox + lobj + lcls) * bs, torch.cat((lbox, lobj, lcls)).detach()

    def build_targets(self, preds, targets):
        """On the CPU (small integer work). Returns per level: classes, boxes (xy offset in
        the cell, wh in grid units), (image, anchor, gy, gx) indices, and matched anchors."""
        na, nt = self.na, targets.shape[0]
        tcls, tbox, indices, anch = [], [], [], []
        gain = torch.ones(7)
        ai = torch.arange(na, dtype=torch.float32).view(na, 1).repeat(1, nt)
        targets = torch.cat((targets.repeat(na, 1, 1), ai[..., None]), 2)  # (na, nt, 7) + anchor id
        g = 0.5
        off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], dtype=torch.float32) * g
        for i in range(self.nl):
            anchors, shape = self.anchors[i], preds[i].shape
            ny, nx = shape[2], shape[3]
            gain[2:6] = torch.tensor([nx, ny, nx, ny], dtype=torch.float32)
            t = targets * gain  # to grid units
            if nt:
                ratio = t[..., 4:6] / anchors[:, None]
                keep = torch.max(ratio, 1 / ratio).max(2)[0] < self.hyp["anchor_t"]
                t = t[keep]
                gxy = t[:, 2:4]
                gxi = gain[[2, 3]] - gxy  # distance to the far edges
                left, up = ((gxy % 1 < g) & (gxy > 1)).T
                right, down = ((gxi % 1 < g) & (gxi > 1)).T
                sel = torch.stack((torch.ones_like(left), left, up, right, down))
                t = t.repeat((5, 1, 1))[sel]
                offsets = (torch.zeros_like(gxy)[None] + off[:, None])[sel]
            else:
                t = targets[0]
                offsets = 0
            bc, gxy, gwh, a = t.split((2, 2, 2, 1), 1)
            a = a.long().view(-1)
            b, c = bc.long().T
            gij = (gxy - offsets).long()
            gi = gij[:, 0].clamp(0, nx - 1)
            gj = gij[:, 1].clamp(0, ny - 1)
            indices.append((b, a, gj, gi))
            tbox.append(torch.cat((gxy - torch.stack((gi, gj), 1), gwh), 1))
            anch.append(anchors[a])
            tcls.append(c)
        return tcls, tbox, indices, anch
