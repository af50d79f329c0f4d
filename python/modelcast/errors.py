"""Exceptions raised by modelcast.

Every failure of the library is a :class:`Error` carrying an :class:`ErrorCode` (the same
numbers as the C++ ``modelcast::ErrorCode`` and the C ABI's ``mc_status``). Each code has its
own subclass, so callers can catch exactly what they handle; the message says what was wrong.
"""

import builtins
import enum


class ErrorCode(enum.IntEnum):
    """What went wrong, mirroring ``modelcast::ErrorCode``."""

    INVALID_ARGUMENT = 1
    LAYOUT_MISMATCH = 2
    PROTOCOL = 3
    TRANSPORT = 4
    TIMEOUT = 5
    INTEGRITY = 6
    STATE = 7
    RESOURCE = 8
    AUTHENTICATION = 9


class Error(Exception):
    """Base of every modelcast exception; ``code`` is an :class:`ErrorCode`."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message

    def __reduce__(self):  # picklable, e.g. across multiprocessing
        return (error_for, (int(self.code), self.message))


def _subclass(name, code, *builtin_bases, doc):
    def __init__(self, message):
        Error.__init__(self, code, message)

    return type(name, (Error,) + builtin_bases, {"__init__": __init__, "__doc__": doc, "code_value": code})


InvalidArgumentError = _subclass("InvalidArgumentError", ErrorCode.INVALID_ARGUMENT, ValueError,
                                 doc="The caller passed something wrong (names, shapes, dtypes, options).")
LayoutMismatchError = _subclass("LayoutMismatchError", ErrorCode.LAYOUT_MISMATCH,
                                doc="Producer and consumer disagree on tensors, dtypes or shapes.")
ProtocolError = _subclass("ProtocolError", ErrorCode.PROTOCOL,
                          doc="A malformed, truncated or unknown-version message.")
TransportError = _subclass("TransportError", ErrorCode.TRANSPORT,
                           doc="UCX or ZeroMQ failed (endpoint unusable, peer gone, ...).")
TimeoutError = _subclass("TimeoutError", ErrorCode.TIMEOUT, builtins.TimeoutError,
                         doc="A bounded wait ran out.")
IntegrityError = _subclass("IntegrityError", ErrorCode.INTEGRITY, doc="A digest did not match.")
StateError = _subclass("StateError", ErrorCode.STATE,
                       doc="The call is not allowed now (e.g. register after publish, closed object).")
ResourceError = _subclass("ResourceError", ErrorCode.RESOURCE,
                          doc="Memory or another resource could not be had.")
AuthenticationError = _subclass("AuthenticationError", ErrorCode.AUTHENTICATION,
                                doc="A key, handshake or signature did not check out.")

_BY_CODE = {cls.code_value: cls for cls in (
    InvalidArgumentError, LayoutMismatchError, ProtocolError, TransportError, TimeoutError,
    IntegrityError, StateError, ResourceError, AuthenticationError)}


def error_for(code, message):
    """A new exception instance of the class for ``code`` (an int), carrying ``message``."""
    cls = _BY_CODE.get(int(code))
    return cls(message) if cls is not None else Error(code, message)
