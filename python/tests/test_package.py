"""The package as imported: its version and what it exports."""

import os
import re

import pytest

import modelcast


def test_package_version_is_the_projects():
    top = os.path.join(os.path.dirname(__file__), "..", "..", "CMakeLists.txt")
    with open(top) as f:
        version = re.search(r"project\(modelcast VERSION ([0-9.]+)", f.read()).group(1)
    assert modelcast.__version__ == version


def test_every_exported_name_exists_and_errors_match_the_codes():
    for name in modelcast.__all__:
        assert hasattr(modelcast, name), name
    for code in modelcast.ErrorCode:
        error = modelcast.errors.error_for(int(code), "message")
        assert error.code == code and str(error) == "message"
        assert isinstance(error, modelcast.Error)
    assert isinstance(modelcast.errors.error_for(1, "x"), ValueError)
    assert isinstance(modelcast.errors.error_for(5, "x"), TimeoutError)


def test_a_star_import_leaves_the_builtin_timeout_error_alone():
    # It rebound TimeoutError, and `except TimeoutError` then missed a socket's timeout.
    scope = {}
    exec("from modelcast import *", scope)
    assert "TimeoutError" not in scope
    assert issubclass(modelcast.TimeoutError, TimeoutError)


def test_an_expected_layout_that_is_no_list_is_named():
    with pytest.raises(modelcast.InvalidArgumentError, match="expected_layout is a list of TensorSpecs"):
        modelcast.Consumer("tcp://127.0.0.1:9", expected_layout=-1)
