#!/usr/bin/env python3
"""Independent reader of modelcastd's repository (json + numpy, none of the writer's code).

usage: read_safetensors.py MODEL_DIR SEED

For every entry of MODEL_DIR prints one line:
  ok VERSION TENSORS BYTES      a complete version whose every byte is the test model's
  partial NAME                  a temporary or half-deleted directory (never to be served)
  bad NAME WHY                  anything else: the test fails on it
The tensor bytes are recomputed from tests/support/test_model.h's word() formula. Where the
reference `safetensors` package is installed, each file is also loaded with it and compared.
"""
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
M = (1 << 64) - 1


def words(seed, version, tensor, count):
    """test_model.h's word(seed, version, tensor, i) for i in [0, count), as little-endian bytes."""
    base = (seed * 0xD6E8FEB86659FD93 + version * 0x9E3779B97F4A7C15 + tensor * 0xC2B2AE3D27D4EB4F) & M
    x = np.arange(count, dtype=np.uint64) + np.uint64(base)  # wraps modulo 2^64 like the C++
    x ^= x >> np.uint64(31)
    with np.errstate(over="ignore"):
        x = x * np.uint64(0xBF58476D1CE4E5B9)
    return x.astype("<u8").tobytes()


def reference_load(path, names):
    """{name: bytes} as the reference library reads the file, or None where it is not installed.
    numpy has no bfloat16, so BF16 tensors are left to the checks above."""
    try:
        from safetensors import safe_open
    except ImportError:
        return None
    out = {}
    with safe_open(path, framework="numpy") as f:
        for name in names:
            if f.get_slice(name).get_dtype() != "BF16":
                out[name] = f.get_tensor(name).tobytes()
    return out


def check_version(path, seed):
    with open(os.path.join(path, "metadata.json")) as f:
        meta = json.load(f)
    version = meta["version"]
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if blob[8:9] != b"{":
        return "the header does not start with '{'"
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    header.pop("__metadata__", None)
    order = meta["tensors"]
    if sorted(order) != sorted(header):
        return "tensor names differ between metadata.json and the header"
    end = 0
    for index, name in enumerate(order):
        entry = header[name]
        begin, stop = entry["data_offsets"]
        if begin != end:
            return f"tensor {name} starts at {begin}, expected {end}"
        elements = int(np.prod(entry["shape"], dtype=np.int64)) if entry["shape"] else 1
        if elements * DTYPES[entry["dtype"]] != stop - begin:
            return f"tensor {name}: shape and offsets disagree"
        raw = data[begin:stop]
        if len(raw) != stop - begin:
            return f"tensor {name} is truncated"
        expected = words(seed, version, index, (len(raw) + 7) // 8)[:len(raw)]
        if raw != expected:
            return f"tensor {name} differs from version {version}"
        end = stop
    if end != len(data):
        return f"{len(data) - end} bytes after the last tensor"
    reference = reference_load(os.path.join(path, "model.safetensors"), order)
    if reference is not None:
        for name, raw in reference.items():
            begin, stop = header[name]["data_offsets"]
            if raw != data[begin:stop]:
                return f"the reference safetensors library reads tensor {name} differently"
    return f"ok {version} {len(order)} {len(data)}"


def main():
    model_dir, seed = sys.argv[1], int(sys.argv[2])
    # A daemon killed before its first write has not made the model's directory yet: no entries.
    if not os.path.isdir(model_dir):
        return
    for name in sorted(os.listdir(model_dir)):
        path = os.path.join(model_dir, name)
        if name.startswith(".tmp-") or name.startswith(".del-"):
            print(f"partial {name}")
            continue
        try:
            result = check_version(path, seed)
        except Exception as e:  # any unreadable file is a failure of the writer
            result = f"{type(e).__name__}: {e}"
        print(result if result.startswith("ok ") else f"bad {name} {result}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
