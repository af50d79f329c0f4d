"""Producer: lives in the trainer, registers its tensors and publishes versions of them."""

from . import _core
from ._dtypes import describe_host_memory
from ._service import Service, _live, check_callback, options_from

class Producer(Service):
    """Publishes versions of registered NumPy arrays / torch tensors to every Consumer.

    Keyword options mirror ``modelcast::ProducerOptions`` (``model_name``, ``control_endpoint``,
    ``snapshot_slots``, ``integrity``, ``first_version``, ``lease_timeout`` and
    ``heartbeat_interval`` in seconds, ``transfer_chunk_bytes``, ``max_consumers``, ``transports``, ``key``,
    ``key_file``, ``allowed_consumer_keys``, ``allow_any_consumer``, ``allow_plaintext_remote``, and
    ``persist_directory``, ``persist_every``, ``persist_keep`` for ``ProducerOptions::persist``:
    checkpoints as safetensors written off the hot path; stats() counts ``persisted_versions``,
    ``persist_failures`` and ``persist_skipped``).
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

    @property
    def control_endpoint(self):
        """The bound endpoint (with the port chosen when the option's port was 0)."""
        return self._impl.control_endpoint()

    def close(self):
        """Stops the producer and releases the registered tensors. Idempotent; later calls raise StateError."""
        self._impl.close()
