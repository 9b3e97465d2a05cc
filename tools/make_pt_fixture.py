"""Write PyTorch-format checkpoints (zip + pickle, as torch.save writes them) from a
safetensors file, with the standard library only: no torch needed.

usage: python3 make_pt_fixture.py model.safetensors out.ckpt --lightning
       python3 make_pt_fixture.py model.safetensors out.pt

--lightning wraps the state dict as a Lightning checkpoint: {"state_dict": {"model.<key>": ...},
"epoch": 0, "global_step": 0}. Used to make tests/fixtures/bigbird/{lightning.ckpt,state_dict.pt}.
"""
import collections
import io
import json
import pickle
import struct
import sys
import types
import zipfile

# Stand-ins for the torch names the pickle refers to, so pickle can write references to them.
torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")


def _rebuild_tensor_v2(*args):  # pragma: no cover - never called, only referenced
    raise RuntimeError


class FloatStorage:
    pass


_rebuild_tensor_v2.__module__ = "torch._utils"
FloatStorage.__module__ = "torch"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2
torch.FloatStorage = FloatStorage
torch._utils = torch_utils
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch_utils


class Storage:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class FakeTensor:
    def __init__(self, storage, shape):
        self.storage, self.shape = storage, shape

    def __reduce__(self):
        stride, acc = [], 1
        for d in reversed(self.shape):
            stride.insert(0, acc)
            acc *= d
        return (_rebuild_tensor_v2, (self.storage, 0, tuple(self.shape), tuple(stride), False, collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", FloatStorage, obj.key, "cpu", obj.numel)
        return None


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name in sorted(header):
        info = header[name]
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        out[name] = (info["shape"], data[a:b])
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    lightning = "--lightning" in sys.argv[3:]
    tensors = read_safetensors(src)
    state = collections.OrderedDict()
    blobs = {}
    for i, (name, (shape, raw)) in enumerate(tensors.items()):
        key = str(i)
        blobs[key] = raw
        numel = len(raw) // 4
        state[("model." + name) if lightning else name] = FakeTensor(Storage(key, numel), shape)
    obj = {"state_dict": state, "epoch": 0, "global_step": 0} if lightning else state
    buf = io.BytesIO()
    TorchPickler(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        for key, raw in blobs.items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", "3\n")


if __name__ == "__main__":
    main()
