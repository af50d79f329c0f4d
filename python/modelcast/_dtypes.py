"""Element types and host-memory checks shared by Producer (registration) and Consumer (layouts).

modelcast names dtypes with short stable strings ('f32', 'bf16', ...). These helpers translate
NumPy and torch dtypes to them and describe an array's memory for registration, refusing what
publish() could not read as one dense block of host memory.
"""

from . import _core
from .errors import InvalidArgumentError

_NUMPY = {"float64": "f64", "float32": "f32", "float16": "f16", "int64": "i64", "int32": "i32",
          "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}
_TORCH = {"torch.float64": "f64", "torch.float32": "f32", "torch.float16": "f16",
          "torch.bfloat16": "bf16", "torch.int64": "i64", "torch.int32": "i32", "torch.int16": "i16",
          "torch.int8": "i8", "torch.uint8": "u8", "torch.bool": "bool"}


def _is_torch_tensor(obj):
    # torch is optional: only look at it when the object comes from there.
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def dtype_name(dtype):
    """The modelcast name of ``dtype``: a modelcast name, a NumPy dtype (or type) or a torch dtype.

    Raises InvalidArgumentError for a type modelcast cannot carry.
    """
    if isinstance(dtype, str) and dtype in _core.dtype_names():
        return dtype
    text = str(dtype)
    if text in _TORCH:
        return _TORCH[text]
    try:
        import numpy
        np_dtype = numpy.dtype(dtype)
    except (TypeError, ImportError):
        np_dtype = None
    if np_dtype is not None and np_dtype.isnative and np_dtype.name in _NUMPY:
        return _NUMPY[np_dtype.name]
    raise InvalidArgumentError(f"dtype {dtype!r} is not one modelcast carries "
                               f"({', '.join(_core.dtype_names())})")


def describe_host_memory(name, obj):
    """(dtype name, shape, address, nbytes) of a NumPy array or torch tensor to register as ``name``.

    The object must be dense (C-contiguous) host memory of a supported dtype; otherwise
    InvalidArgumentError says which tensor and what is wrong. Nothing is copied.
    """
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise InvalidArgumentError(
                f"tensor '{name}' is on {obj.device}; modelcast registers host (CPU) memory only")
        if obj.layout != _torch_strided():
            raise InvalidArgumentError(f"tensor '{name}' has layout {obj.layout}; only dense tensors can be registered")
        if not obj.is_contiguous():
            raise InvalidArgumentError(
                f"tensor '{name}' is not contiguous; register a contiguous tensor (publish() reads one dense "
                f"block, and .contiguous() would be a copy the trainer does not update)")
        if str(obj.dtype) not in _TORCH:
            raise InvalidArgumentError(f"tensor '{name}' has dtype {obj.dtype}, which modelcast does not carry")
        return _TORCH[str(obj.dtype)], list(obj.shape), obj.data_ptr(), obj.element_size() * obj.numel()
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None and isinstance(obj, numpy.ndarray):
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError(
                f"array '{name}' is not C-contiguous; register a contiguous array (publish() reads one dense "
                f"block, and a contiguous copy would not see the trainer's updates)")
        if not obj.dtype.isnative or obj.dtype.name not in _NUMPY:
            raise InvalidArgumentError(f"array '{name}' has dtype {obj.dtype}, which modelcast does not carry "
                                       f"(native-endian {', '.join(_NUMPY)})")
        return _NUMPY[obj.dtype.name], list(obj.shape), obj.__array_interface__["data"][0], obj.nbytes
    raise InvalidArgumentError(
        f"tensor '{name}': expected a numpy.ndarray or a torch.Tensor, got {type(obj).__name__}")


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
    return _core.TensorSpec(name, dtype_name(dtype), [int(d) for d in shape])
