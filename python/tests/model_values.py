"""The test model: tensors of every kind the binding handles, and the values each version holds.

Both the producer process and the consumer compute them from the version number, so the
consumer can check every element of every version it receives.
"""

import numpy as np
import torch

# name -> (kind, dtype, shape). "torch" tensors are registered as torch tensors, "numpy" as arrays.
LAYOUT = {
    "encoder.weight": ("torch", torch.float32, (256, 130)),      # several 64 KiB chunks
    "encoder.bias": ("torch", torch.float32, (130,)),
    "embedding": ("torch", torch.bfloat16, (40, 8)),
    "mask": ("torch", torch.bool, (33,)),
    "counts": ("numpy", np.int64, (17, 3)),
    "scale": ("numpy", np.float16, (5,)),
    "step": ("numpy", np.int32, ()),                               # a scalar
}


def make_tensors():
    """Freshly allocated tensors of LAYOUT (zeros)."""
    out = {}
    for name, (kind, dtype, shape) in LAYOUT.items():
        out[name] = torch.zeros(shape, dtype=dtype) if kind == "torch" else np.zeros(shape, dtype=dtype)
    return out


def expected(name, version):
    """The values `name` holds in `version`, as a NumPy array (bf16 as float32)."""
    kind, dtype, shape = LAYOUT[name]
    n = int(np.prod(shape, dtype=np.int64))
    base = np.arange(n, dtype=np.int64).reshape(shape)
    if name == "mask":
        return (base + version) % 3 == 0
    if name == "embedding":  # small integers are exact in bf16
        return ((base + version) % 64).astype(np.float32)
    if name == "step":
        return np.array(version * 7, dtype=np.int32)
    if kind == "torch":
        return (base % 1000 * 0.25 + version).astype(np.float32)
    return ((base + version * 1000) % 30000).astype(dtype)


def fill(tensors, version):
    """Writes version `version`'s values into the registered tensors, in place."""
    for name, t in tensors.items():
        values = expected(name, version)
        if isinstance(t, torch.Tensor):
            t.copy_(torch.from_numpy(np.ascontiguousarray(values)).to(t.dtype))
        else:
            t[...] = values


def as_numpy(t):
    """A tensor or array received by the consumer as a NumPy array comparable with expected()."""
    if isinstance(t, torch.Tensor):
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return t
