"""What Producer and Consumer share: option structs from keyword arguments, argument and callback checks,
closing every live one at interpreter exit, stats, callback error counts, and ``with``."""

import atexit
import ctypes
import datetime
import inspect
import math
import numbers
import operator
import os
import weakref

from .errors import InvalidArgumentError, StateError

_live = weakref.WeakSet()


@atexit.register
def _close_all():
    # Stop library threads while the interpreter can still run their callbacks.
    for obj in list(_live):
        obj.close()


_WHERE_INSTEAD = ("make Producers and Consumers in a process started with multiprocessing's 'spawn' or "
                  "'forkserver' method, or fork before making any")

# (parent, child) in a child forked while Producers or Consumers were live in the parent.
_forked_while_live = None


def check_not_forked_while_live(what):
    """StateError in a child forked while the parent had live Producers or Consumers: the transport
    library's (UCX's) process-wide threads stayed in the parent, and a Consumer made in the child
    connected and then never received a version, saying nothing."""
    if _forked_while_live is not None and _forked_while_live[1] == os.getpid():
        parent, child = _forked_while_live
        raise StateError(f"{what}: this process ({child}) was forked by process {parent} while that had a Producer or "
                         f"Consumer: the transport library's threads stay in the parent, and one made here would "
                         f"connect and then never send or receive a version; {_WHERE_INSTEAD}")


class _ForkedAway:
    """What a Producer's or Consumer's native object is in a child made by fork(): the library's
    threads and sockets stayed in the parent, so every call raises StateError, and close() (the
    child's exit runs it) does nothing."""

    def __init__(self, what, parent, child):
        self._why = (f"this {what} was made in process {parent}, and this is a child it forked ({child}): "
                     f"its threads and sockets stay in the parent; {_WHERE_INSTEAD}")

    def close(self):
        pass

    def __getattr__(self, name):
        raise StateError(self._why)


def _after_fork_in_child():
    # A child's publish() went nowhere and reused the parent's version numbers, its consumer
    # never saw a new version, and its exit crashed (joining threads the child does not have,
    # locks held in the parent at the fork). Each object's native part is kept alive for good in
    # the child, so that its destructor never runs there, and replaced by _ForkedAway.
    global _forked_while_live
    parent, child = os.getppid(), os.getpid()
    impls = [obj.__dict__.get("_impl") for obj in list(_live)]
    # A child of such a child inherits what it lacks too (its objects are all forked away by then).
    if _forked_while_live is not None or any(
            impl is not None and not isinstance(impl, _ForkedAway) and not impl.closed for impl in impls):
        _forked_while_live = (parent, child)
    for obj in list(_live):
        impl = obj.__dict__.get("_impl")
        if impl is None or isinstance(impl, _ForkedAway):
            continue
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(impl))
        obj._impl = _ForkedAway(type(obj).__name__, parent, child)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def check_callback(what, name, fn):
    """InvalidArgumentError unless ``fn`` is None or callable, and not an ``async def`` function."""
    if fn is not None and not callable(fn):
        raise InvalidArgumentError(f"{what}: {name} must be callable or None, not {type(fn).__name__}")
    # Called on a library thread, it made a coroutine that nothing awaited: the callback never ran.
    if fn is not None and (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))):
        raise InvalidArgumentError(f"{what}: {name} is an async function; callbacks run on a library thread, which has "
                                   f"no event loop: pass a plain function (it may hand its argument to your loop "
                                   f"with loop.call_soon_threadsafe)")


def is_boolean(value):
    """Whether ``value`` is a truth value in any of its forms: bool, NumPy's bool_, a boolean
    array or tensor. operator.index and pybind11 take each as 0 or 1 (buffers=np.True_ was
    "buffers must be between 2 and 1024, got 1"; a want's index torch.tensor(True) was 1)."""
    if isinstance(value, bool):
        return True
    try:
        return str(value.dtype) in ("bool", "torch.bool")
    except Exception:  # no dtype, or one that cannot be read: not a boolean array
        return False


def integer(name, value, minimum=None, maximum=None):
    """``value`` as an int within [minimum, maximum] (either bound optional); InvalidArgumentError
    naming ``name`` for anything else. Not int(): a float (a fraction of an epoch, say) would
    silently lose its fraction; nor a bool, which operator.index takes as 0 or 1. Integer types
    other than int (NumPy's, a 0-d tensor) are taken. The bounds are the C++ type's, checked here
    because pybind11's own refusal of a value out of range names no parameter."""
    try:
        if is_boolean(value):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if minimum is not None and number < minimum:
        raise InvalidArgumentError(f"{name} must be at least {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise InvalidArgumentError(f"{name} must be at most {maximum}, got {number}")
    return number


# The ranges of the C++ integer types the library takes (std::int64_t, std::uint64_t, std::size_t).
INT64 = (-2**63, 2**63 - 1)
UINT64 = (0, 2**64 - 1)


def text(name, value):
    """``value`` if it is a str; InvalidArgumentError naming ``name`` otherwise (None included:
    pybind11 would refuse it with a TypeError naming no parameter)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, not {type(value).__name__}")
    why = utf8_problem(value)
    if why:
        raise InvalidArgumentError(f"{name} {why}")
    return value


def real(name, value):
    """``value`` as a float when it is a real number (int, float, NumPy's); InvalidArgumentError
    naming ``name`` otherwise: float() read the str "1.5" as a number, and NumPy dropped the
    imaginary part of a complex one with only a warning. A 0-d tensor or array (a loss as torch
    computes it) is its one number, as integer() takes a 0-d integer one."""
    number = value
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        number = value.item()
    if isinstance(number, bool) or not isinstance(number, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a real number, not {type(value).__name__} ({value!r})")
    return float(number)


def utf8_problem(value, shown=None):
    """Why the str ``value`` cannot reach the library, which takes text as UTF-8 (a lone surrogate,
    as surrogateescape makes: pybind11 refused it with a TypeError naming nothing), or None.
    ``shown`` replaces the value's repr in the message."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"is not valid text: {e.reason} at index {e.start} ({repr(value) if shown is None else shown})"
    return None


def integers(name, values, minimum=None, maximum=None):
    """A list of ints from a sequence (a list, tuple, torch.Size); InvalidArgumentError naming
    ``name`` and the element that is not an integer in range."""
    # A 0-d array or tensor has __iter__ but cannot be iterated: a bare TypeError named nothing.
    if (isinstance(values, (str, bytes)) or not hasattr(values, "__iter__")
            or getattr(values, "ndim", None) == 0):
        what = f"a 0-d {type(values).__name__}" if getattr(values, "ndim", None) == 0 else type(values).__name__
        raise InvalidArgumentError(f"{name} must be a sequence of integers, not {what}")
    return [integer(f"{name}[{i}]", v, minimum, maximum) for i, v in enumerate(values)]


# The longest duration the library takes at its word (common/clock.h, kLongestWait: 100 years);
# longer ones would overflow its clock. A wait may ask for longer (math.inf: for ever) and waits
# this long; an option may not.
LONGEST_S = 100 * 365 * 24 * 3600.0


def seconds(what, name, value, forever_ok=False):
    """``value`` (int or float seconds, or a datetime.timedelta) as a timedelta of whole
    milliseconds, the library's unit, rounded up; InvalidArgumentError names ``name`` otherwise.
    With ``forever_ok`` (a wait), anything past LONGEST_S, math.inf included, waits LONGEST_S."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{what}: {name} is a duration in seconds (a number or a timedelta), "
                                   f"not {type(value).__name__}")
    # A number past a float's range (10**400, a Fraction of it) made math.isnan raise a bare
    # OverflowError.
    try:
        value = float(value)
    except OverflowError:
        value = math.inf if value > 0 else -math.inf
    if math.isnan(value):
        raise InvalidArgumentError(f"{what}: {name} is not a number (nan)")
    if value < 0:
        raise InvalidArgumentError(f"{what}: {name} must not be negative ({value} s)")
    if value > LONGEST_S:
        if forever_ok:
            return _whole_milliseconds(LONGEST_S)
        raise InvalidArgumentError(f"{what}: {name} must be at most {LONGEST_S:.0f} s (100 years), got "
                                   f"{'a longer one' if math.isinf(value) else f'{value} s'}")
    return _whole_milliseconds(value)


def _whole_milliseconds(value):
    # pybind11 truncates float seconds to milliseconds, and binary fractions fall short: 1.001 s
    # was 1000 ms, 0.0009 s was 0 (a wait that did not wait, a lease of 0). Rounded up instead,
    # past a float's error on whole milliseconds, and handed over as a timedelta, which converts
    # exactly.
    ms = value * 1000.0
    whole = math.floor(ms)
    if ms - whole > 1e-14 * max(100.0, ms):
        whole += 1
    return datetime.timedelta(milliseconds=whole)


def options_from(cls, kwargs, what):
    """An options struct of class ``cls`` with ``kwargs`` set (see set_option)."""
    options = cls()
    for key, value in kwargs.items():
        set_option(options, key, value, what)
    return options


def set_option(options, key, value, what):
    """Sets field ``key`` of the bound options struct ``options``; InvalidArgumentError, naming ``what``
    and the field, for an unknown one, a duration (an option the library holds as a timedelta) that is
    no number of seconds, a switch that is not True or False, a number that is a bool, and a value of
    another type or out of range."""
    if key.startswith("_") or not hasattr(options, key):
        known = sorted(k for k in dir(options) if not k.startswith("_"))
        raise InvalidArgumentError(f"{what}: unknown option '{key}' (known: {', '.join(known)})")
    default = getattr(options, key)
    # An option that holds keys may hold a secret one (a secret passed where a KeyPair goes):
    # its value is never quoted, as no error of the library quotes a key.
    shown = "its value not shown: it may hold a secret key" if "key" in key else repr(value)
    if isinstance(default, datetime.timedelta):
        value = seconds(what, key, value)
    # Paths (key_file, persist_directory) as pathlib.Path as well as str.
    if isinstance(default, str) and isinstance(value, os.PathLike):
        value = os.fspath(value)
    # An empty key option (an unset variable's value) read as none: a plaintext producer, or a
    # consumer that pins no producer, without a word. Leaving the option out says none.
    # So is a run id: ranks of one run would then look like two runs to consumers.
    if ("key" in key or key == "run_id") and isinstance(default, str) and value == "":
        raise InvalidArgumentError(f"{what}: option '{key}' is '' (empty): leave it out for none")
    # pybind11 takes True as 1 (buffers=True was "buffers must be between 2 and 1024, got 1").
    if is_boolean(value) and not isinstance(default, bool):
        raise InvalidArgumentError(f"{what}: option '{key}' takes {type(default).__name__}, not bool ({shown})")
    # pybind11's bool caster takes None, ints and floats: integrity=None turned integrity off,
    # allow_any_consumer=2 turned it on. A switch is True or False (numpy's bool too).
    if isinstance(default, bool) and not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise InvalidArgumentError(f"{what}: option '{key}' takes True or False, not {type(value).__name__} ({shown})")
    try:
        setattr(options, key, value)
    except TypeError:
        # pybind11's own message names neither the option nor what was wrong with the value.
        if isinstance(value, str) and utf8_problem(value):
            raise InvalidArgumentError(f"{what}: option '{key}' {utf8_problem(value, shown)}") from None
        if isinstance(default, int) and isinstance(value, int) and not isinstance(value, bool):
            raise InvalidArgumentError(f"{what}: option '{key}' is out of range ({value})") from None
        raise InvalidArgumentError(f"{what}: option '{key}' takes {type(default).__name__}, "
                                   f"not {type(value).__name__} ({shown})") from None


class Service:
    """Base of Producer and Consumer: ``self._impl`` is the bound C++ object."""

    def stats(self):
        """A snapshot of the counters (ProducerStats or ConsumerStats). Thread-safe."""
        return self._impl.stats()

    @property
    def callback_errors(self):
        """How many times a callback (on_delivery, on_update, on_error) raised."""
        return self._impl.callback_errors

    def __reduce_ex__(self, protocol):
        # pickle, copy.copy and copy.deepcopy all come here. Without it copy.copy made a second
        # object sharing the first one's native part (closing either closed both), and pickle
        # named a private type ('_core._Producer') and not what to do instead.
        what = type(self).__name__
        raise TypeError(f"a {what} cannot be pickled or copied: it owns library threads, sockets and registered "
                        f"memory in this process; share the object itself, or make a {what} in each process "
                        f"(with multiprocessing: in the worker)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
