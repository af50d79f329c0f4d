"""Key files for CurveZMQ (KeyPair, as ``modelcast-keygen`` writes them): paths as str or any
os.PathLike (pathlib.Path), and every wrong argument an InvalidArgumentError naming it rather than
pybind11's TypeError naming no parameter."""

import os

from . import _core
from ._service import text
from .errors import InvalidArgumentError


def _path(function, path):
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        raise InvalidArgumentError(f"{function}(): path must be a str or os.PathLike of str, not bytes")
    return text(f"{function}(): path", path)


def save_key_pair(keys, path, overwrite=False):
    """Writes ``path`` (mode 0600, the secret key) and ``path``.pub. Raises InvalidArgumentError or
    ResourceError naming the file; an existing file is kept unless ``overwrite``."""
    if not isinstance(keys, _core.KeyPair):
        raise InvalidArgumentError(f"save_key_pair(): keys must be a KeyPair, not {type(keys).__name__}")
    if not isinstance(overwrite, bool):
        raise InvalidArgumentError(f"save_key_pair(): overwrite must be a bool, not {type(overwrite).__name__}")
    _core.save_key_pair(keys, _path("save_key_pair", path), overwrite)


def load_key_pair(path):
    """The KeyPair of a key file. Raises InvalidArgumentError naming the file and what is malformed."""
    return _core.load_key_pair(_path("load_key_pair", path))


def load_public_key(path):
    """The public key (Z85) of a key file or its .pub."""
    return _core.load_public_key(_path("load_public_key", path))
