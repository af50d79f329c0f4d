"""Producer: lives in the trainer, registers its tensors and publishes versions of them."""

import atexit
import weakref

from . import _core
from ._dtypes import describe_host_memory
from .errors import InvalidArgumentError

_live = weakref.WeakSet()


@atexit.register
def _close_all():
    # Stop library threads while the interpreter can still run their callbacks.
    for obj in list(_live):
        obj.close()


def check_callback(what, name, fn):
    """InvalidArgumentError unless ``fn`` is None or callable."""
    if fn is not None and not callable(fn):
        raise InvalidArgumentError(f"{what}: {name} must be callable or None, not {type(fn).__name__}")


def options_from(cls, kwargs, what):
    """An options struct of class ``cls`` with ``kwargs`` set; InvalidArgumentError names an unknown one."""
    options = cls()
    for key, value in kwargs.items():
        if key.startswith("_") or not hasattr(options, key):
            known = sorted(k for k in dir(options) if not k.startswith("_"))
            raise InvalidArgumentError(f"{what}: unknown option '{key}' (known: {', '.join(known)})")
        setattr(options, key, value)
    return options


class Producer:
    """Publishes versions of registered NumPy arrays / torch tensors to every Consumer.

    Keyword options mirror ``modelcast::ProducerOptions`` (``model_name``, ``control_endpoint``,
    ``snapshot_slots``, ``integrity``, ``first_version``, ``lease_timeout`` and
    ``heartbeat_interval`` in seconds, ``transfer_chunk_bytes``, ``max_consumers``, ``transports``, ``key``,
    ``key_file``, ``allowed_consumer_keys``, ``allow_any_consumer``, ``allow_plaintext_remote``).
    ``on_delivery(delivery)`` runs on the producer's service thread with the GIL taken; an
    exception it raises is reported through ``sys.unraisablehook`` and counted in
    ``callback_errors``. Raises InvalidArgumentError for bad options, TransportError if the
    endpoint cannot be bound. Use from one thread at a time (publish() is not reentrant).
    """

    def __init__(self, *, on_delivery=None, **options):
        check_callback("Producer", "on_delivery", on_delivery)
        self._impl = _core._Producer(options_from(_core.ProducerOptions, options, "Producer"), on_delivery)
        _live.add(self)

    def register(self, name, tensor):
        """Registers ``tensor`` (a NumPy array or CPU torch tensor) under ``name``, without a copy.

        publish() copies the tensor's memory as it is at that moment, so the trainer keeps
        updating it in place (optimizer steps do). The Producer keeps a reference to ``tensor``
        until close(). Only before the first publish(). Raises InvalidArgumentError naming the
        tensor if it is not dense host memory of a supported dtype, or the name is empty or
        taken; StateError after the first publish.
        """
        dtype, shape, address, nbytes = describe_host_memory(name, tensor)
        self._impl.register_memory(name, dtype, shape, address, nbytes, tensor)

    def register_all(self, tensors):
        """register() for every (name, tensor) of a mapping, e.g. ``model.state_dict()``."""
        for name, tensor in tensors.items():
            self.register(name, tensor)

    def prepare(self):
        """Allocates the snapshot slots now (optional). StateError if nothing is registered."""
        self._impl.prepare()

    def publish(self, step, metadata=None):
        """Snapshots every registered tensor as version N and returns a PublishTicket.

        Blocks (GIL released) for the copy only; delivery continues in the background. The
        trainer must not modify the tensors from another thread meanwhile. ``metadata`` maps
        names to values, sent as strings (``str(value)``). StateError if nothing is registered.
        """
        meta = {str(k): str(v) for k, v in (metadata or {}).items()}
        return self._impl.publish(int(step), meta)

    def wait_for_consumers(self, count, timeout):
        """True once ``count`` consumers have joined, False after ``timeout`` seconds (GIL released)."""
        return self._impl.wait_for_consumers(count, timeout)

    def stats(self):
        """A ProducerStats snapshot."""
        return self._impl.stats()

    @property
    def control_endpoint(self):
        """The bound endpoint (with the port chosen when the option's port was 0)."""
        return self._impl.control_endpoint()

    @property
    def callback_errors(self):
        """How many times on_delivery raised."""
        return self._impl.callback_errors

    def close(self):
        """Stops the producer and releases the registered tensors. Idempotent; later calls raise StateError."""
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
