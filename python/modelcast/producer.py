"""Producer: lives in the trainer, registers its tensors and publishes versions of them."""

import operator
import sys

from . import _core
from ._dtypes import _is_torch_tensor, describe_memory
from ._service import (INT64, UINT64, Service, _live, check_callback, check_not_forked_while_live, integer, integers,
                       is_boolean, options_from, seconds, text)
from .errors import InvalidArgumentError


def _metadata_text(value):
    """A metadata value as sent: a 0-d tensor or array as its number, for str() of a torch loss
    is "tensor(0.2736, grad_fn=<MeanBackward0>)" and a consumer would have to parse that."""
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        value = value.item()
    return str(value)

class Producer(Service):
    """Publishes versions of registered NumPy arrays / torch tensors to every Consumer.

    Keyword options mirror ``modelcast::ProducerOptions`` (``model_name``, ``control_endpoint``,
    ``snapshot_slots``, ``integrity``, ``first_version``, ``lease_timeout`` and
    ``heartbeat_interval`` in seconds, ``transfer_chunk_bytes``, ``device_stage_bytes``, ``max_consumers``, ``transports``,
    ``relay_fanout`` (consumers relay versions to each other; stats() counts ``relayed_deliveries``,
    ``bytes_relayed`` and ``relay_faults``, and a Delivery names its ``relay``), ``key``,
    ``key_file``, ``allowed_consumer_keys``, ``allow_any_consumer``, ``allow_plaintext_remote``, and
    ``persist_directory``, ``persist_every``, ``persist_keep`` for ``ProducerOptions::persist``:
    checkpoints as safetensors written off the hot path; stats() counts ``persisted_versions``,
    ``persist_failures`` and ``persist_skipped``). For device (CUDA) tensors stats() also counts
    ``failed_snapshots`` and ``host_copies`` (versions copied to host memory: none while every
    consumer reads the GPU over CUDA IPC). ``snapshot_bytes_copied`` is what publish() copied
    into snapshot slots: less than the model per version while little of it changes (publish()
    then copies only the blocks the slot lacks). ``refused_joins`` counts joins it refused (each
    joiner is told why; the log shows at most one every 10 s) and ``refused_peers`` key handshakes
    it refused.
    ``on_delivery(delivery)`` runs on the producer's service thread with the GIL taken; an
    exception it raises is reported through ``sys.unraisablehook`` and counted in
    ``callback_errors``. Raises InvalidArgumentError for bad options, TransportError if the
    endpoint cannot be bound. Use from one thread at a time (publish() is not reentrant).
    """

    def __init__(self, *, on_delivery=None, **options):
        check_not_forked_while_live("Producer")
        check_callback("Producer", "on_delivery", on_delivery)
        self._impl = _core._Producer(options_from(_core.ProducerOptions, options, "Producer"), on_delivery)
        _live.add(self)

    def register(self, name, tensor, *, global_shape=None, global_offset=None):
        """Registers ``tensor`` under ``name``, without a copy: a NumPy array, a torch tensor on the
        CPU or a CUDA device, or any object with ``__cuda_array_interface__`` or
        ``__dlpack__``/``__dlpack_device__`` (CUDA memory when they say so).

        publish() copies the tensor's memory as it is at that moment, so the trainer keeps
        updating it in place (optimizer steps do). The Producer keeps a reference to ``tensor``
        until close(). All tensors of a producer live in one place: host memory, or one CUDA
        device (device tensors need a device: a CUDA build, or MODELCAST_DEVICE=simulated for
        tests). Only before the first publish(). Raises InvalidArgumentError naming the tensor if
        it is not dense (contiguous) memory of a supported dtype, is not where it says it is, or
        the name is empty or taken; StateError for device memory without a device, or after the
        first publish.

        A tensor given new memory (``param.data = ...``, NumPy's ``resize(refcheck=False)`` of the
        array or of the one it views) is refused at publish(). A torch tensor over memory it does
        not own (``torch.from_numpy(a)``, ``torch.frombuffer(b)``) is not: torch does not see its
        owner reallocated, so publish() would read freed memory. Register the owner (the NumPy
        array), or never resize it while the Producer is open.

        A model trained sharded (``rank=r, rank_count=M``; rank 0 also ``rank_endpoints``, every
        rank's ``control_endpoint`` in rank order, e.g. from ``torch.distributed.all_gather_object``):
        each rank registers its piece of a tensor with the whole tensor's ``global_shape`` and the
        piece's ``global_offset`` in it (a DTensor's local shard: its ``shape`` and offsets); ranks
        registering the same box replicate it. Consumers told rank 0's endpoint assemble a step
        once every rank published it. Give every rank of a run the same ``run_id``, new at each
        restart (e.g. ``f"{os.environ['TORCHELASTIC_RUN_ID']}.{os.environ['TORCHELASTIC_RESTART_COUNT']}"``):
        consumers never put pieces of two runs together, even while an old run's rank still
        publishes.
        """
        text("register(): name", name)
        # `is None`, not `or []`: a NumPy array has no truth value.
        global_shape = integers("register(): global_shape", [] if global_shape is None else global_shape, 0, INT64[1])
        global_offset = integers("register(): global_offset", [] if global_offset is None else global_offset, 0, INT64[1])
        m = describe_memory(name, tensor)
        # A shape from an interface (not from real memory) may claim any size: said here, rather
        # than as the binding's TypeError for a number past 64 bits.
        if any(extent < 0 for extent in m.shape):
            raise InvalidArgumentError(f"tensor '{name}' has a negative extent in shape {m.shape}")
        if m.nbytes >= 2**64:
            raise InvalidArgumentError(f"tensor '{name}' with shape {m.shape} has more bytes than 64 bits can count")
        self._impl.register_memory(name, m.dtype, m.shape, m.address, m.nbytes, m.owners, m.memory, m.device,
                                   global_shape, global_offset)
        # `param.data = ...`, `.half()` or `.to()` assigned back give a tensor object new storage,
        # and NumPy's `resize(refcheck=False)` reallocates an array we reference; either may free
        # the old memory, which publish() would otherwise go on reading (a crash, or another
        # object's bytes). The binding remembers where the memory is and checks it at publish().
        if _is_torch_tensor(tensor):
            self._impl.watch(name, tensor, True)
        elif _is_numpy_array(tensor):
            self._impl.watch(name, tensor, False)
            # A view (w = base[:n]) keeps its address when its base is reallocated
            # (base.resize(..., refcheck=False)): the array that owns the memory is watched too.
            # Through a memoryview too (np.asarray(memoryview(base))): its .obj is the array.
            owner = tensor
            while True:
                base = owner.base
                if isinstance(base, memoryview):
                    base = base.obj
                if not _is_numpy_array(base):
                    break
                owner = base
            if owner is not tensor:
                self._impl.watch(name, owner, False)

    def register_all(self, tensors):
        """register() for every (name, tensor) of a mapping or of an iterable of pairs
        (``model.named_parameters()``, then ``model.named_buffers()``). Each tensor is checked
        before any is registered, so a dense-memory or dtype refusal registers nothing; one the
        library refuses (a name registered before, host and device memory mixed) leaves those
        before it registered.

        Prefer the parameters themselves to ``model.state_dict()``: its tensors are new handles on
        the parameters' memory, and code that gives a parameter new memory (``param.data = ...``,
        ``torch.nn.utils.vector_to_parameters``) leaves them on the old, which publish() would go
        on sending without a word; a registered parameter given new memory is refused at
        publish()."""
        if hasattr(tensors, "items"):
            pairs = list(tensors.items())
        else:
            try:
                pairs = list(tensors)
            except TypeError:
                pairs = None
            if pairs is None or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
                raise InvalidArgumentError("register_all() takes a mapping or (name, tensor) pairs, e.g. model.state_dict() "
                                           f"or model.named_parameters(); got {type(tensors).__name__}")
        for name, tensor in pairs:
            text("register(): name", name)
            describe_memory(name, tensor)
        for name, tensor in pairs:
            self.register(name, tensor)

    def prepare(self):
        """Allocates the snapshot slots now (optional). StateError if nothing is registered."""
        self._impl.prepare()

    def publish(self, step, metadata=None, stream=None, event=None):
        """Snapshots every registered tensor as version N and returns a PublishTicket.

        Blocks (GIL released) for the copy, and beyond it only while every snapshot slot is held by
        consumers still reading (at most the lease timeout; Ctrl-C is taken once it returns);
        delivery continues in the background. The trainer must not modify the tensors from another
        thread meanwhile. One publish() at a time: a call while another runs (from another thread)
        raises StateError, and so does a call from ``on_delivery`` that finds every slot in use (it
        never waits there: the slot comes free on the thread running the callback). ``metadata`` maps
        names (str) to values, sent as strings (``str(value)``; a 0-d tensor or array, such as a
        torch loss or a NumPy scalar, as ``str(value.item())``). StateError if nothing is registered;
        InvalidArgumentError, with ``rank_count`` > 1, for a step not above the last published.

        For device tensors, ``stream`` and ``event`` order the snapshot's copies against the
        trainer's GPU work (both are ignored for host tensors):

        - ``stream`` (a ``torch.cuda.Stream``, e.g. ``torch.cuda.current_stream()``, or a raw
          ``cudaStream_t`` as an int): the copies start after the work queued on that stream so
          far, and work queued on it after publish() returns waits for them on the GPU, so the
          next optimizer step cannot overwrite the weights mid-copy. publish() does not wait for
          the copies.
        - ``event`` (a ``torch.cuda.Event`` the trainer recorded, or a raw ``cudaEvent_t``): the
          copies start after it; publish() waits for them.
        - neither: the copies follow the legacy default stream; publish() waits for them. Stream
          0 (torch's default stream) is the legacy default stream, so it means the same.
        """
        self._check_storage()
        step = integer("publish(): step", step, *INT64)
        if metadata is not None and not callable(getattr(metadata, "items", None)):
            raise InvalidArgumentError(f"publish(): metadata must be a mapping of names to values (a dict) or None, "
                                       f"not {type(metadata).__name__}")
        # Keys are names: str() of a key made 1 and "1" one entry, and the last one won silently.
        for key in (metadata or {}):
            if not isinstance(key, str):
                raise InvalidArgumentError(f"publish(): metadata key {key!r} is a {type(key).__name__}; keys are str")
        for key, value in (metadata or {}).items():
            # str() of a NumPy array elides all but a few of its values ("[0. 0.0005 ... 1.]").
            if getattr(value, "ndim", 0) != 0:
                raise InvalidArgumentError(f"publish(): metadata value of {key!r} is an array ({type(value).__name__}); "
                                           f"values are sent as strings, and an array's str() leaves values out: "
                                           f"send a string you made of it (json.dumps(value.tolist()))")
        meta = {text("publish(): metadata key", k): _metadata_text(v) for k, v in (metadata or {}).items()}
        for key, value in meta.items():
            text(f"publish(): metadata value of {key!r}", value)
        return self._impl.publish(step, meta, _handle(stream, "stream", ("cuda_stream", "ptr")),
                                  _handle(event, "event", ("cuda_event", "ptr")))

    def _check_storage(self):
        """InvalidArgumentError naming the first registered tensor or array whose storage changed."""
        moved = self._impl.moved_storage()
        if moved is not None:
            name, (address, nbytes, dtype), now = moved
            what = []
            if now[2] != dtype:
                what.append(f"dtype {dtype} -> {now[2]}")
            if now[1] != nbytes:
                what.append(f"{nbytes} -> {now[1]} bytes")
            if now[0] != address:
                what.append("new memory")
            raise InvalidArgumentError(
                f"publish: tensor '{name}' no longer uses the memory registered for it ({', '.join(what)}): its "
                f"storage was replaced (torch: `.data = ...`, `.half()`, `.to()`, `.set_()`, `.share_memory_()`; "
                f"NumPy: `resize(refcheck=False)`, of the array or of the one it is a view of); nothing was published. "
                f"Update registered tensors in place (optimizer steps, `.copy_()`), or register the new ones "
                f"on a new Producer")

    def wait_for_consumers(self, count, timeout):
        """True once ``count`` consumers have joined, False after ``timeout`` seconds (GIL released;
        Ctrl-C, KeyboardInterrupt, ends the wait). Raises StateError if another thread closes the
        producer meanwhile."""
        count = integer("wait_for_consumers(): count", count, *UINT64)
        return self._impl.wait_for_consumers(count, seconds("wait_for_consumers", "timeout", timeout, forever_ok=True))

    @property
    def control_endpoint(self):
        """The bound endpoint (with the port chosen when the option's port was 0)."""
        return self._impl.control_endpoint()

    def close(self):
        """Stops the producer and releases the registered tensors. Idempotent; later calls raise StateError.
        A ``wait_for_consumers`` on another thread returns at once, raising StateError."""
        self._impl.close()


def _is_numpy_array(obj):
    # NumPy is optional here, as in _dtypes: an array registered means it is imported.
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray)


def _handle(obj, what, attributes):
    """The raw CUDA handle (an int, 0 for None) of ``obj``: an int, or an object carrying it in one
    of ``attributes`` (torch.cuda.Stream.cuda_stream, torch.cuda.Event.cuda_event, CuPy's .ptr)."""
    if obj is None:
        return 0
    for attribute in attributes:
        if not isinstance(obj, int) and hasattr(obj, attribute):
            obj = getattr(obj, attribute)
            break
    # Any integer type (NumPy's too) as everywhere else; a bool is no handle.
    value = None
    if not is_boolean(obj):
        try:
            value = operator.index(obj)
        except TypeError:
            pass
    if value is None or value < 0 or value >= 2**64:
        raise InvalidArgumentError(
            f"publish: {what} must be None, a raw CUDA {what} handle (an int from 0 to 2^64 - 1) or an object with "
            f"{' or '.join('.' + a for a in attributes)}, not {obj!r} ({type(obj).__name__})")
    return value
