"""Consumers that switch versions together (group=, group_size=): a member alone waits and serves
nothing; with the group complete, each member serves the version once all of them hold it."""

import time

import numpy as np
import pytest

import modelcast
from conftest import WAIT_S


def wait_until(condition, limit_s=WAIT_S):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0)
    return condition()


def test_members_serve_a_version_only_once_the_whole_group_holds_it(endpoint):
    w = np.arange(4096, dtype=np.float32)
    with modelcast.Producer(control_endpoint=endpoint, model_name="grp") as producer:
        producer.register("w", w)
        producer.prepare()
        with modelcast.Consumer(endpoint, model_name="grp", group="tp", group_size=2) as first:
            version = producer.publish(1).version
            assert wait_until(lambda: first.stats().group_waiting), first.stats().last_error
            assert "1 of its 2 members" in first.stats().last_error
            assert first.acquire() is None
            with modelcast.Consumer(endpoint, model_name="grp", group="tp", group_size=2) as second:
                for member in (first, second):
                    view = member.wait_for_version(version, WAIT_S)
                    assert view is not None, member.stats().last_error
                    np.testing.assert_array_equal(view.array("w"), w)
                    stats = member.stats()
                    assert stats.group_version == version and stats.prepared_version == 0
                    assert not stats.group_waiting


def test_a_group_without_a_size_is_refused(endpoint):
    with pytest.raises(modelcast.InvalidArgumentError) as error:
        modelcast.Consumer(endpoint, model_name="grp", group="tp")
    assert "group_size" in str(error.value)
