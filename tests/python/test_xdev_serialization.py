"""torch.save / torch.load of xdev tensors, storages and modules."""
import io

import torch
import torch.nn as nn

import xdev_util  # noqa: F401


def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


def test_tensor_roundtrip_keeps_device_and_values():
    x = torch.arange(6.0, device="xdev:2").view(2, 3)
    y = _roundtrip(x)
    assert y.device == torch.device("xdev:2")
    assert torch.equal(y.cpu(), x.cpu())


def test_map_location():
    x = torch.arange(4, device="xdev:0")
    assert _roundtrip(x, map_location="xdev:1").device == torch.device("xdev:1")
    assert _roundtrip(x, map_location="cpu").device == torch.device("cpu")
    c = _roundtrip(torch.arange(3.0), map_location="xdev:3")
    assert c.device == torch.device("xdev:3") and c.cpu().tolist() == [0.0, 1.0, 2.0]
    d = _roundtrip(x, map_location={"xdev:0": "xdev:5"})
    assert d.device == torch.device("xdev:5")


def test_views_share_storage_after_load():
    x = torch.arange(8.0, device="xdev")
    a, b = _roundtrip((x[:4], x[2:]))
    a[3] = 100
    assert b[1].item() == 100


def test_module_state_dict_roundtrip():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to("xdev")
    sd = _roundtrip(m.state_dict(), map_location="xdev:1")
    m2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to("xdev:1")
    m2.load_state_dict(sd)
    for p, q in zip(m.state_dict().values(), m2.state_dict().values()):
        assert q.device == torch.device("xdev:1")
        assert torch.equal(p.cpu(), q.cpu())
