"""Element types and memory checks shared by Producer (registration) and Consumer (layouts).

modelcast names dtypes with short stable strings ('f32', 'bf16', ...). These helpers translate
NumPy, torch and DLPack dtypes to them and describe a tensor's memory for registration (host
memory, or CUDA device memory from torch, ``__cuda_array_interface__`` or DLPack), refusing what
publish() could not read as one dense block.
"""

import sys

from . import _core
from ._service import INT64, integers, text
from .errors import InvalidArgumentError

_NUMPY = {"float64": "f64", "float32": "f32", "float16": "f16", "int64": "i64", "int32": "i32",
          "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}
_TORCH = {"torch.float64": "f64", "torch.float32": "f32", "torch.float16": "f16",
          "torch.bfloat16": "bf16", "torch.int64": "i64", "torch.int32": "i32", "torch.int16": "i16",
          "torch.int8": "i8", "torch.uint8": "u8", "torch.bool": "bool"}


def _is_torch_tensor(obj):
    # torch is optional: only look at it when it is imported (a tensor means it is). An instance
    # check, not the type's module: subclasses defined elsewhere (an nn.Parameter subclass, as
    # quantization libraries make) took the DLPack path, which refuses a tensor that requires
    # grad, and were not watched for replaced storage.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def dtype_name(dtype):
    """The modelcast name of ``dtype``: a modelcast name, a NumPy dtype (or type) or a torch dtype.

    Raises InvalidArgumentError for a type modelcast cannot carry.
    """
    if isinstance(dtype, str) and dtype in _core.dtype_names():
        return dtype
    text = str(dtype)
    if text in _TORCH:
        return _TORCH[text]
    # numpy.dtype(None) is float64: None is no dtype. Whatever else NumPy cannot read (a bad
    # structured spelling raises ValueError) is refused as not carried, not let out bare.
    np_dtype = None
    if dtype is not None:
        try:
            import numpy
            np_dtype = numpy.dtype(dtype)
        except Exception:
            np_dtype = None
    if np_dtype is not None and np_dtype.isnative and np_dtype.name in _NUMPY:
        return _NUMPY[np_dtype.name]
    raise InvalidArgumentError(f"dtype {dtype!r} is not one modelcast carries "
                               f"({', '.join(_core.dtype_names())})")


class Memory:
    """What register() needs of a tensor: its dtype name, shape, address and size, where the bytes
    live ('host' or 'cuda' and the device ordinal), and the objects to keep referenced."""

    def __init__(self, dtype, shape, address, nbytes, memory="host", device=0, owners=()):
        self.dtype, self.shape, self.address, self.nbytes = dtype, [int(d) for d in shape], int(address), int(nbytes)
        self.memory, self.device, self.owners = memory, int(device), tuple(owners)


_NOT_CONTIGUOUS = ("is not contiguous; register a contiguous tensor (publish() reads one dense block, and a "
                   "contiguous copy would not see the trainer's updates)")


def _compact(shape, strides, itemsize):
    """True if ``strides`` (in bytes) are C-contiguous for ``shape``; extents of 1 may have any stride."""
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _element_count(shape):
    count = 1
    for extent in shape:
        count *= int(extent)
    return count


def describe_memory(name, obj):
    """The Memory of a tensor to register as ``name``: a NumPy array, a torch tensor (CPU or CUDA),
    or any object exposing ``__cuda_array_interface__`` or ``__dlpack__``/``__dlpack_device__``
    (device memory when they say CUDA).

    The tensor must be dense (C-contiguous) memory of a supported dtype; otherwise
    InvalidArgumentError says which tensor and what is wrong. Nothing is copied.
    """
    if _is_torch_tensor(obj):
        if obj.device.type not in ("cpu", "cuda"):
            raise InvalidArgumentError(
                f"tensor '{name}' is on {obj.device}; modelcast registers host (CPU) or CUDA memory")
        if obj.layout != _torch_strided():
            raise InvalidArgumentError(f"tensor '{name}' has layout {obj.layout}; only dense tensors can be registered")
        if not obj.is_contiguous():
            raise InvalidArgumentError(f"tensor '{name}' {_NOT_CONTIGUOUS}")
        if str(obj.dtype) not in _TORCH:
            raise InvalidArgumentError(f"tensor '{name}' has dtype {obj.dtype}, which modelcast does not carry")
        # A lazy negation or conjugation (`.conj().imag`, torch._neg_view) is a flag on the tensor,
        # not in its memory: registered by address, every consumer got the values with the wrong sign.
        for lazy, resolve in (("is_neg", "resolve_neg"), ("is_conj", "resolve_conj")):
            if getattr(obj, lazy, lambda: False)():
                raise InvalidArgumentError(
                    f"tensor '{name}' has torch's lazy {lazy[3:]} bit set: its memory holds the values before "
                    f"that operation, which is what would be sent; register a tensor whose memory holds its values "
                    f"(`.{resolve}()` makes one, a copy the trainer must keep up to date)")
        nbytes = obj.element_size() * obj.numel()
        if obj.device.type == "cuda":
            return Memory(_TORCH[str(obj.dtype)], obj.shape, obj.data_ptr(), nbytes, "cuda", obj.device.index, (obj,))
        return Memory(_TORCH[str(obj.dtype)], obj.shape, obj.data_ptr(), nbytes, owners=(obj,))
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None and isinstance(obj, numpy.ndarray):
        # Its data holds values the mask hides: published, the consumer got them as weights.
        if isinstance(obj, numpy.ma.MaskedArray):
            raise InvalidArgumentError(f"array '{name}' is a masked array; modelcast carries the data, not the mask: "
                                       f"register numpy.ma.filled(array, fill) kept up to date, or a plain array")
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError(
                f"array '{name}' is not C-contiguous; register a contiguous array (publish() reads one dense "
                f"block, and a contiguous copy would not see the trainer's updates)")
        if not obj.dtype.isnative or obj.dtype.name not in _NUMPY:
            raise InvalidArgumentError(f"array '{name}' has dtype {obj.dtype}, which modelcast does not carry "
                                       f"(native-endian {', '.join(_NUMPY)})")
        return Memory(_NUMPY[obj.dtype.name], obj.shape, obj.__array_interface__["data"][0], obj.nbytes,
                      owners=(obj,))
    if hasattr(obj, "__cuda_array_interface__"):
        return _describe_cuda_array_interface(name, obj, numpy)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        memory = _describe_dlpack(name, obj)
        # DLPack has no bool before its 0.8 (a received bool tensor goes out as u8): a received
        # tensor registered again (a consumer relaying what it got) keeps the dtype it has.
        if isinstance(obj, _core.ViewTensor) and obj.spec.dtype == "bool" and memory.dtype == "u8":
            memory.dtype = "bool"
        return memory
    raise InvalidArgumentError(
        f"tensor '{name}': expected a numpy.ndarray, a torch.Tensor, or an object with __cuda_array_interface__ "
        f"or __dlpack__, got {type(obj).__name__}")


def _describe_cuda_array_interface(name, obj, numpy):
    cai = obj.__cuda_array_interface__
    try:
        shape = [int(d) for d in cai["shape"]]
        typestr = cai["typestr"]
        address = int(cai["data"][0])
    except (KeyError, TypeError, ValueError, IndexError):
        raise InvalidArgumentError(f"tensor '{name}': __cuda_array_interface__ lacks shape, typestr or data") from None
    if not 0 <= address < 2**64:
        raise InvalidArgumentError(f"tensor '{name}': __cuda_array_interface__'s data pointer {address} is not an "
                                   f"address (0 to 2^64 - 1)")
    if cai.get("mask") is not None:
        raise InvalidArgumentError(f"tensor '{name}': a masked __cuda_array_interface__ cannot be registered")
    if numpy is None:
        raise InvalidArgumentError(f"tensor '{name}': reading __cuda_array_interface__'s typestr needs NumPy")
    try:
        np_dtype = numpy.dtype(typestr)
    except TypeError:
        np_dtype = None
    if np_dtype is None or not np_dtype.isnative or np_dtype.name not in _NUMPY:
        raise InvalidArgumentError(f"tensor '{name}' has typestr {typestr!r}, which modelcast does not carry "
                                   f"(native-endian {', '.join(_NUMPY)})")
    strides = cai.get("strides")
    if strides is not None and not _compact(shape, [int(s) for s in strides], np_dtype.itemsize):
        raise InvalidArgumentError(f"tensor '{name}' {_NOT_CONTIGUOUS}")
    # The interface names no device: the pointer's own device is the one (None: not device
    # memory, which register() refuses, naming where the pointer is).
    device = _core._device_of(address)
    return Memory(_NUMPY[np_dtype.name], shape, address, _element_count(shape) * np_dtype.itemsize, "cuda",
                  0 if device is None else device, (obj,))


# DLPack (type code, bits) -> modelcast dtype; codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
_DLPACK = {(2, 64): "f64", (2, 32): "f32", (2, 16): "f16", (4, 16): "bf16", (0, 64): "i64", (0, 32): "i32",
           (0, 16): "i16", (0, 8): "i8", (1, 8): "u8", (6, 8): "bool"}


def _describe_dlpack(name, obj):
    # What the exporter returns is checked here, as its errors (an unpacking ValueError,
    # pybind11's TypeError) named neither the tensor nor the call.
    device = obj.__dlpack_device__()
    if (not isinstance(device, tuple) or len(device) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in device)):
        raise InvalidArgumentError(f"tensor '{name}': __dlpack_device__() returned {device!r}, not "
                                   f"(device_type, device_id) ints")
    device_type, device_id = device
    if device_type not in (_core.DLPACK_CPU, _core.DLPACK_CUDA):
        raise InvalidArgumentError(f"tensor '{name}' is on DLPack device type {device_type}; modelcast registers "
                                   f"host (kDLCPU) or CUDA (kDLCUDA) memory")
    capsule = obj.__dlpack__()
    try:
        info = _core._dlpack_info(capsule)
    except TypeError:
        raise InvalidArgumentError(f"tensor '{name}': __dlpack__() returned a {type(capsule).__name__}, not a "
                                   f"DLPack capsule") from None
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"tensor '{name}': {e}") from None
    if (info["device_type"], info["device_id"]) != (device_type, device_id):
        raise InvalidArgumentError(
            f"tensor '{name}': __dlpack_device__() says {(device_type, device_id)} but its DLPack tensor is on "
            f"{(info['device_type'], info['device_id'])}")
    dtype = _DLPACK.get((info["code"], info["bits"]))
    if dtype is None or info["lanes"] != 1:
        raise InvalidArgumentError(f"tensor '{name}' has DLPack dtype (code {info['code']}, {info['bits']} bits, "
                                   f"{info['lanes']} lanes), which modelcast does not carry")
    shape, itemsize = info["shape"], info["bits"] // 8
    if info["strides"] is not None and not _compact(shape, [s * itemsize for s in info["strides"]], itemsize):
        raise InvalidArgumentError(f"tensor '{name}' {_NOT_CONTIGUOUS}")
    memory = "cuda" if device_type == _core.DLPACK_CUDA else "host"
    # The unconsumed capsule owns its exporter's hold on the memory: kept as long as the object.
    return Memory(dtype, shape, info["data"], _element_count(shape) * itemsize, memory,
                  device_id if memory == "cuda" else 0, (obj, capsule))


def _torch_strided():
    import torch
    return torch.strided


def tensor_spec(entry):
    """A TensorSpec from a TensorSpec or a (name, dtype, shape) tuple (dtype as in dtype_name)."""
    if isinstance(entry, _core.TensorSpec):
        return entry
    try:
        name, dtype, shape = entry
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"expected_layout entry {entry!r} is not a TensorSpec or (name, dtype, shape)") from None
    # Not int(): a shape of [2.7] was taken as [2].
    return _core.TensorSpec(text("expected_layout: name", name), dtype_name(dtype),
                            integers(f"expected_layout: shape of {name!r}", shape, 0, INT64[1]))
