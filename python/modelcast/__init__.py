"""modelcast: ship model weights from a trainer to inference processes, without copies in Python.

A trainer creates a :class:`Producer`, registers its NumPy arrays or torch tensors, CPU or CUDA
(their memory, not a copy), and calls ``publish(step)``. An inference process creates a
:class:`Consumer` (``memory="cuda"`` to receive into GPU memory) and reads the newest
:class:`ModelView`, whose ``array(name)`` (NumPy, read only), ``tensor(name)`` (torch) and
``dlpack(name)`` (any DLPack importer) share the received bytes and keep them valid while used.
Failures raise :class:`Error` subclasses carrying an :class:`ErrorCode`.
``modelcast.predictor`` forecasts the loss curve and decides when to publish.
"""

from . import errors
from ._version import __version__
from ._core import (ConsumerStats, Delivery, KeyPair, ModelView, ProducerStats, PublishTicket, TensorSpec,
                    ViewTensor, dtype_names, dtype_size, generate_key_pair)
from .keys import load_key_pair, load_public_key, save_key_pair
from .consumer import Consumer
from .errors import (AuthenticationError, Error, ErrorCode, IntegrityError, InvalidArgumentError,
                     LayoutMismatchError, ProtocolError, ResourceError, StateError, TimeoutError,
                     TransportError)
from .producer import Producer
from . import predictor

__all__ = [
    "__version__", "Producer", "Consumer", "ModelView", "ViewTensor", "TensorSpec", "PublishTicket", "Delivery", "ProducerStats",
    "ConsumerStats", "KeyPair", "generate_key_pair", "save_key_pair", "load_key_pair", "load_public_key",
    "dtype_names", "dtype_size", "Error", "ErrorCode", "InvalidArgumentError", "LayoutMismatchError",
    "ProtocolError", "TransportError", "IntegrityError", "StateError", "ResourceError",
    "AuthenticationError", "errors", "predictor",
]
# Not TimeoutError: `from modelcast import *` would rebind the builtin, and an `except TimeoutError`
# after it would no longer catch a socket's. modelcast.TimeoutError subclasses the builtin, so
# `except TimeoutError` catches the library's too.
