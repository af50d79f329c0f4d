"""Consumer: lives in the inference process and always has the newest installed version."""

from . import _core
from ._dtypes import dtype_name, tensor_spec
from ._service import INT64, UINT64, Service, _live, check_callback, check_not_forked_while_live, integer, integers, options_from, seconds, text
from .errors import InvalidArgumentError


class Consumer(Service):
    """Receives versions from the producer at ``producer_endpoint`` in the background.

    Keyword options mirror ``modelcast::ConsumerOptions`` (``model_name``, ``consumer_name``,
    ``expected_layout`` as TensorSpecs or (name, dtype, shape) tuples, ``buffers``, ``transports``,
    ``path`` (the delivery path to insist on; stats() ``transport`` and ``path`` say which were used),
    ``producer_timeout`` and ``transfer_timeout`` in seconds, ``max_model_bytes``,
    ``producer_public_key``, ``key``, ``key_file``, ``allow_plaintext_remote``, ``serve_peers``:
    relay versions to other consumers when the producer asks; stats() counts ``bytes_relayed``
    and ``relay_faults``). Caller-owned receive buffers are not offered in Python.

    ``conversions`` serves tensors in another dtype, converted once each version is verified (on
    the device for a device consumer): a dict ``{name: dtype}`` or a list of ``(name, dtype)``
    or ``(name, dtype, fp8_block)``, ``name`` ``"*"`` for every f32, f16 and bf16 tensor not
    named, ``dtype`` ``"f32"``, ``"f16"``, ``"bf16"`` or ``"f8e4m3"`` (a torch or NumPy dtype
    works for the first three). f8e4m3 tensors come as their uint8 codes; ``view.scales(name)``
    gives their scales.

    ``wants`` keeps parts of the model (cut on the device for a device consumer): a dict
    ``{name: want}``, ``name`` ``"*"`` for every tensor not named, a want being ``"whole"``,
    ``None`` (nothing of it), ``("shard", dim, index, count)`` (part ``index`` of ``count``
    along ``dim``, as torch.chunk splits it; under ``"*"`` a tensor without ``dim`` is kept
    whole) or a list of ``(offset, extent)`` boxes. Only the blocks holding those bytes are
    fetched; a view's array or tensor is then the part, ``view.box(name)`` gives ``(offset,
    whole_shape)``, and stats() ``wanted_bytes``. With several boxes of a tensor,
    ``view.parts(name)`` lists them and the ``part=`` argument of ``array``, ``tensor``,
    ``box``, ``scales`` and ``dlpack`` picks one (0, the first, by default).

    ``group="name", group_size=N`` makes this consumer one of the N ranks of a server that switch
    versions together: a version becomes visible here only once every rank holds it verified
    (stats() gives ``group_version``, ``prepared_version`` and ``group_waiting``; ``buffers`` >= 3).

    ``memory="cuda"`` with ``device=N`` receives every version into memory of CUDA device N
    (checked there before it becomes visible): views then hold device pointers, export them
    through DLPack as kDLCUDA on device N (``torch.from_dlpack(view.dlpack(name))`` or
    ``view.tensor(name)`` give CUDA tensors; a bool tensor comes through DLPack as uint8, which
    has no bool type in the version used, and as torch.bool from ``tensor()``), and refuse NumPy
    access. Needs a device (a CUDA
    build on a GPU machine, or MODELCAST_DEVICE=simulated for tests): StateError otherwise.

    ``on_update(view)`` and ``on_error(error)`` run on the consumer's service thread with the GIL
    taken (keep them short: the next update waits); an exception they raise is reported through
    ``sys.unraisablehook`` and counted in ``callback_errors``. Construction does not wait for the
    producer. Raises InvalidArgumentError for bad options (a malformed endpoint included).
    All methods are thread-safe.
    """

    def __init__(self, producer_endpoint, *, on_update=None, on_error=None, expected_layout=None, conversions=None,
                 wants=None, **options):
        check_not_forked_while_live("Consumer")
        check_callback("Consumer", "on_update", on_update)
        check_callback("Consumer", "on_error", on_error)
        opts = options_from(_core.ConsumerOptions, options, "Consumer")
        opts.producer_endpoint = text("Consumer: producer_endpoint", producer_endpoint)
        if expected_layout is not None:
            if isinstance(expected_layout, (str, bytes)) or not hasattr(expected_layout, "__iter__"):
                raise InvalidArgumentError("Consumer: expected_layout is a list of TensorSpecs or (name, dtype, shape) "
                                           f"tuples, not {type(expected_layout).__name__}")
            opts.expected_layout = [tensor_spec(e) for e in expected_layout]
        if conversions is not None:
            opts.conversions = _conversions(conversions)
        if wants is not None:
            opts.wants = _wants(wants)
        self._impl = _core._Consumer(opts, on_update, on_error)
        _live.add(self)

    def acquire(self):
        """The newest installed ModelView, or None before the first. Never blocks on transfers."""
        return self._impl.acquire()

    def wait_for_version(self, version, timeout):
        """The newest ModelView once a version >= ``version`` is installed, or None after
        ``timeout`` seconds. Releases the GIL while waiting; Ctrl-C (KeyboardInterrupt) ends the
        wait; raises StateError if another thread closes the consumer meanwhile."""
        version = integer("wait_for_version(): version", version, *UINT64)
        return self._impl.wait_for_version(version, seconds("wait_for_version", "timeout", timeout, forever_ok=True))

    def close(self):
        """Stops the consumer. Views, arrays and tensors taken from it stay valid. Idempotent.
        A ``wait_for_version`` on another thread returns at once, raising StateError.

        A device consumer whose buffer peers are reading (CUDA IPC) first waits for them, up to
        its ``producer_timeout``. It also waits for an ``on_update`` or ``on_error`` in flight to
        return (Ctrl-C does not end that wait): do not call it holding a lock such a callback
        takes."""
        self._impl.close()


def _conversions(conversions):
    if isinstance(conversions, dict):
        items = conversions.items()
    elif isinstance(conversions, (list, tuple)):
        items = conversions
    else:
        raise InvalidArgumentError(f"Consumer: conversions is a dict {{name: dtype}} or a list of (name, dtype) or "
                                   f"(name, dtype, fp8_block), not {type(conversions).__name__}")
    out = []
    for item in items:
        try:
            name, dtype, *rest = item
            if len(rest) > 1:
                raise ValueError(f"{len(item)} elements")
            rest = [integer(f"Consumer: the conversion of {name!r}: fp8_block", value, 0, UINT64[1]) for value in rest]
            out.append(_core.TensorConversion(text("Consumer: a name in conversions", name), dtype_name(dtype), *rest))
        except InvalidArgumentError:
            raise
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"Consumer: the conversion {item!r} is not (name, dtype) or "
                                       f"(name, dtype, fp8_block) ({_reason(e)})") from None
    return out


def _reason(error):
    """What a TypeError or ValueError from unpacking or pybind11 says, in one line."""
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return "an element of the wrong type (sizes and indices are ints)" if "incompatible" in first else first


def _wants(wants):
    if not isinstance(wants, dict):
        raise InvalidArgumentError(f"Consumer: wants is a dict {{name: want}}, not {type(wants).__name__}")
    out = []
    for name, want in wants.items():
        try:
            out.append(_want(name, want))
        except InvalidArgumentError:
            raise
        except (TypeError, ValueError) as e:
            # pybind11's and unpacking's own messages name neither the tensor nor the form wanted.
            raise InvalidArgumentError(f"the want of '{name}' is {want!r}: {_reason(e)}") from None
    return out


def _want(name, want):
    text("Consumer: a name in wants", name)
    if want is None or want == "nothing":
        return _core.TensorWant(name, "nothing")
    if want == "whole":
        return _core.TensorWant(name, "whole")
    if isinstance(want, (tuple, list)) and want and isinstance(want[0], str) and want[0] == "shard":
        if len(want) != 4:
            raise InvalidArgumentError(f"the want of '{name}': ('shard', dim, index, count), got {want!r}")
        # integer(): NumPy's ints are ints, and a negative one is said to be negative, not "the
        # wrong type".
        dim, index, count = (integer(f"the want of '{name}': {field}", value, low, UINT64[1])
                             for field, value, low in zip(("dim", "index", "count"), want[1:], (0, 0, 1)))
        return _core.TensorWant(name, "shard", dim, index, count)
    if isinstance(want, list):
        boxes = []
        for b, box in enumerate(want):
            if isinstance(box, (str, bytes)) or not hasattr(box, "__len__") or len(box) != 2:
                raise InvalidArgumentError(f"the want of '{name}': box {b} is {box!r}, not (offset, extent)")
            boxes.append((integers(f"the want of '{name}': box {b} offset", box[0], 0, INT64[1]),
                          integers(f"the want of '{name}': box {b} extent", box[1], 0, INT64[1])))
        return _core.TensorWant(name, "boxes", boxes=boxes)
    raise InvalidArgumentError(
        f"the want of '{name}' is {want!r}: 'whole', None, ('shard', dim, index, count) or a list of "
        "(offset, extent) boxes")
