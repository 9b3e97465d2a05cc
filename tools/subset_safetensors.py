"""Copy a subset of the tensors of a safetensors file (standard library only).

usage: python3 subset_safetensors.py IN OUT [NAME ...]
Keeps every tensor named NAME or NAME.* for one of the given names (all when none are given),
and the file's metadata. Used to make the small test fixtures in tests/fixtures/.
"""
import json
import struct
import sys


def main():
    src, dst, prefixes = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(src, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    keep = {k: v for k, v in header.items() if not prefixes or any(k == p or k.startswith(p + ".") for p in prefixes)}
    out_header, chunks, offset = {}, [], 0
    for name in sorted(keep):
        info = keep[name]
        a, b = info["data_offsets"]
        chunks.append(data[a:b])
        out_header[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [offset, offset + b - a]}
        offset += b - a
    if meta is not None:
        out_header["__metadata__"] = meta
    blob = json.dumps(out_header, separators=(",", ":")).encode()
    blob += b" " * ((8 - len(blob) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for c in chunks:
            f.write(c)


if __name__ == "__main__":
    main()
