"""Bad input raises modelcast exceptions carrying the library's code and naming what was wrong."""

import copy
import pickle
import threading
import time

import numpy as np
import pytest
import torch

import modelcast
from modelcast import ErrorCode
from conftest import WAIT_S


@pytest.fixture
def producer(endpoint):
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as p:
        yield p


def raises(cls, code, *words):
    """Context manager: raises `cls` with .code == code and every word in the message."""
    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(cls)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            assert self.info.value.code == code
            assert isinstance(self.info.value, modelcast.Error)
            for word in words:
                assert word in str(self.info.value), f"{word!r} not in {str(self.info.value)!r}"
            return handled
    return Check()


def test_unsupported_dtypes_are_refused_naming_the_tensor(producer):
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'phase'", "complex64"):
        producer.register("phase", torch.zeros(3, dtype=torch.complex64))
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'u16'", "uint16"):
        producer.register("u16", np.zeros(3, dtype=np.uint16))
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'big'", ">f4"):
        producer.register("big", np.zeros(3, dtype=">f4"))  # not native byte order
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'lst'", "list"):
        producer.register("lst", [1.0, 2.0])
    # Its hidden values were published as weights, the mask dropped without a word.
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'masked'", "masked array"):
        producer.register("masked", np.ma.masked_array(np.ones(3, dtype=np.float32), mask=[0, 1, 0]))


def test_a_tensor_with_a_lazy_negation_or_conjugation_is_refused(producer):
    # The flag is not in the memory: registered by address, consumers got the other sign.
    z = torch.tensor([[1 + 2j], [3 + 4j]], dtype=torch.complex64)[:1]
    imag = z.conj().imag
    assert imag.is_neg() and imag.is_contiguous()
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'imag'", "lazy neg bit", "resolve_neg"):
        producer.register("imag", imag)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'negated'", "lazy neg bit"):
        producer.register("negated", torch._neg_view(torch.ones(3)))
    producer.register("resolved", imag.resolve_neg())  # a tensor whose memory holds its values


def test_non_contiguous_memory_is_refused_naming_the_tensor(producer):
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'w.T'", "not contiguous"):
        producer.register("w.T", torch.zeros(4, 5).t())
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'every_other'", "not C-contiguous"):
        producer.register("every_other", np.zeros((4, 6))[:, ::2])


def test_device_tensors_are_refused_naming_the_tensor(producer):
    # The meta device stands in for any non-CPU device (no GPU needed): the check is the same.
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'gpu.weight'", "meta", "host"):
        producer.register("gpu.weight", torch.empty(3, device="meta"))


def test_a_tensor_whose_storage_was_replaced_is_refused_at_publish(producer):
    # What PyTorch code does all the time: `.data =`, `.half()`, `.to()` give a registered
    # tensor new memory (and may free the old), which publish() would otherwise go on reading.
    weight = torch.nn.Parameter(torch.ones(16))
    bias = torch.zeros(4)
    producer.register("weight", weight)
    producer.register("bias", bias)
    producer.publish(1)
    with torch.no_grad():
        weight.mul_(2)  # in place: fine
    producer.publish(2)
    weight.data = torch.zeros(16)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'weight'", "new memory",
                "nothing was published"):
        producer.publish(3)
    assert producer.stats().versions_published == 2
    # `.half()` assigned back: another dtype and half the bytes, each said.
    weight.data = weight.data.half()
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'weight'",
                "dtype torch.float32 -> torch.float16", "64 -> 32 bytes", "new memory"):
        producer.publish(3)
    assert producer.stats().versions_published == 2


def test_an_array_resized_through_a_memoryview_of_it_is_refused_at_publish(producer):
    # The owner behind a memoryview was not watched: publish() read the freed memory (a crash).
    base = np.ones(1 << 22, dtype=np.float32)
    weights = np.asarray(memoryview(base))
    producer.register("weights", weights)
    producer.publish(1)
    base.resize(4 << 22, refcheck=False)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'weights'", "nothing was published"):
        producer.publish(2)
    assert producer.stats().versions_published == 1


def test_a_tensor_subclass_from_outside_torch_is_registered_and_watched_as_a_tensor(producer):
    # Quantization libraries subclass nn.Parameter in their own modules: such a parameter was
    # refused with DLPack's raw RuntimeError (it requires grad), and a Tensor subclass whose
    # storage was replaced went on publishing the old bytes, saying nothing.
    class QuantParam(torch.nn.Parameter):
        pass

    class Tagged(torch.Tensor):
        pass

    weight = QuantParam(torch.ones(8))
    tagged = torch.zeros(8).as_subclass(Tagged)
    producer.register("weight", weight)
    producer.register("tagged", tagged)
    producer.publish(1)
    tagged.data = torch.full((8,), 5.0)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'tagged'", "new memory",
                "nothing was published"):
        producer.publish(2)
    assert producer.stats().versions_published == 1


def test_a_numpy_array_resized_without_its_refcheck_is_refused_at_publish(producer):
    # resize(refcheck=False) reallocates an array the producer still reads: publish() read the
    # freed memory (a segmentation fault with 16 MiB, whose memory goes back to the system).
    weights = np.ones(1 << 22, dtype=np.float32)
    producer.register("weights", weights)
    producer.publish(1)
    weights.resize(4, refcheck=False)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'weights'", "16777216 -> 16 bytes",
                "resize(refcheck=False)", "nothing was published"):
        producer.publish(2)
    assert producer.stats().versions_published == 1


def test_a_view_whose_base_array_is_reallocated_is_refused_at_publish(producer):
    # The view keeps its own address when its base is resized: only the view was watched, and
    # publish() read the freed memory (a crash, or garbage published without a word).
    base = np.ones(1 << 22, dtype=np.float32)
    producer.register("weights", base[: 1 << 20])
    producer.publish(1)
    base.resize(4, refcheck=False)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'weights'", "16777216 -> 16 bytes",
                "nothing was published"):
        producer.publish(2)
    assert producer.stats().versions_published == 1


def test_metadata_keys_are_names_and_two_that_print_alike_are_not_merged(producer):
    producer.register("w", np.ones(3, dtype=np.float32))
    # str() of the keys made one entry of 1 and "1", and one of the values was lost.
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "metadata key 1 is a int; keys are str"):
        producer.publish(1, metadata={1: "int key", "1": "str key"})
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "metadata key b'k' is a bytes"):
        producer.publish(1, metadata={b"k": "v"})
    assert producer.stats().versions_published == 0
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "stream must be None",
                "from 0 to 2^64 - 1"):
        producer.publish(1, stream=2**70)


def test_register_all_takes_pairs_and_checks_every_tensor_before_registering_any(producer):
    # A generator of pairs was "'generator' object has no attribute 'items'"; a tensor refused
    # half-way left the ones before it registered, so the corrected retry was "duplicate name".
    module = torch.nn.Linear(4, 4)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "register_all() takes a mapping or (name, tensor) pairs"):
        producer.register_all(module)
    bad = {"ok": np.ones(4, dtype=np.float32), "strided": np.ones((4, 4), dtype=np.float32)[:, 0]}
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'strided'"):
        producer.register_all(bad)
    bad["strided"] = np.ascontiguousarray(bad["strided"])
    producer.register_all(bad)  # nothing of the refused call was registered
    producer.register_all(module.named_parameters())
    assert producer.publish(1).version == 1


def test_a_tensor_whose_dtype_changed_is_refused_at_publish(producer):
    module = torch.nn.Linear(4, 4)
    producer.register_all(dict(module.named_parameters()))
    producer.publish(1)
    module.half()
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "'weight'", "torch.float16"):
        producer.publish(2)


def test_library_checks_surface_with_their_codes(producer):
    with raises(modelcast.StateError, ErrorCode.STATE):
        producer.publish(1)  # nothing registered
    producer.register("w", np.ones(3, dtype=np.float32))
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "w"):
        producer.register("w", np.ones(3, dtype=np.float32))  # duplicate name
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT):
        producer.register("", np.ones(3, dtype=np.float32))
    producer.publish(1)
    with raises(modelcast.StateError, ErrorCode.STATE):
        producer.register("late", np.ones(3, dtype=np.float32))
    producer.close()
    with raises(modelcast.StateError, ErrorCode.STATE, "closed"):
        producer.publish(2)


def test_a_step_that_is_not_an_integer_is_refused_naming_it(producer):
    # int() would make publish(1.5) step 1 without a word.
    producer.register("w", np.ones(3, dtype=np.float32))
    for step in (1.5, 2.0, "3", True):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "step", repr(step)):
            producer.publish(step)
    assert producer.stats().versions_published == 0
    assert producer.publish(np.int64(4)).step == 4  # integer types other than int are integers
    assert producer.publish(torch.tensor(5)).step == 5


def test_arguments_of_the_wrong_type_or_range_are_refused_naming_them(endpoint):
    # Each was pybind11's TypeError ("incompatible function arguments"), which named no parameter
    # and escaped `except modelcast.Error`; a metadata that is no mapping was an AttributeError.
    def refused(call, *words):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, *words):
            call()

    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer:
        w = np.ones(4, dtype=np.float32)
        refused(lambda: producer.register(None, w), "register(): name must be a str, not NoneType")
        refused(lambda: producer.register(b"w", w), "register(): name must be a str, not bytes")
        refused(lambda: producer.register("w", w, global_shape="4", global_offset=[0]),
                "register(): global_shape must be a sequence of integers, not str")
        # A 0-d array or tensor raised a bare TypeError ("iteration over a 0-d array").
        refused(lambda: producer.register("w", w, global_shape=np.array(8), global_offset=[0]),
                "register(): global_shape must be a sequence of integers, not a 0-d ndarray")
        refused(lambda: producer.register("w", w, global_shape=[8], global_offset=torch.tensor(0)),
                "register(): global_offset must be a sequence of integers, not a 0-d Tensor")
        refused(lambda: producer.register("w", w, global_shape=[8], global_offset=[1.5]),
                "register(): global_offset[0] must be an integer, got 1.5")
        refused(lambda: producer.register("w", w, global_shape=[-8], global_offset=[0]),
                "register(): global_shape[0] must be at least 0, got -8")
        producer.register("w", w, global_shape=torch.Size([4]), global_offset=np.zeros(1, dtype=np.int64))
        refused(lambda: producer.publish(2**63), "publish(): step must be at most 9223372036854775807")
        refused(lambda: producer.publish(np.True_), "publish(): step must be an integer, got True")
        refused(lambda: producer.publish(1, metadata=["lr", 0.1]), "publish(): metadata must be a mapping", "list")
        refused(lambda: producer.wait_for_consumers(-1, 0), "wait_for_consumers(): count must be at least 0, got -1")
        refused(lambda: producer.wait_for_consumers(None, 0), "wait_for_consumers(): count must be an integer")
        assert producer.stats().versions_published == 0
        refused(lambda: modelcast.Consumer(None), "Consumer: producer_endpoint must be a str, not NoneType")

        with modelcast.Consumer(endpoint, model_name="pytest") as consumer:
            refused(lambda: consumer.wait_for_version(-1, 0), "wait_for_version(): version must be at least 0, got -1")
            refused(lambda: consumer.wait_for_version(2**64, 0), "wait_for_version(): version must be at most")
            refused(lambda: consumer.wait_for_version("1", 0), "wait_for_version(): version must be an integer, got '1'")
            view = consumer.wait_for_version(producer.publish(1, metadata={"lr": 0.1}).version, WAIT_S)
            for method in ("array", "tensor", "box", "spec", "scales", "dlpack", "data_ptr"):
                call = getattr(view, method)
                refused(lambda: call(None), f"ModelView.{method}(): name must be a str, not NoneType")
                refused(lambda: call("w", part=-1), f"ModelView.{method}(): part must not be negative, got -1")
                refused(lambda: call("w", part=1.0), f"ModelView.{method}(): part must be an integer, got 1.0")
                refused(lambda: call("w", part=True), f"ModelView.{method}(): part must be an integer, got True")
            refused(lambda: view.array("w", part=2**70), "ModelView.array(): part is too large")
            refused(lambda: view.parts(3), "ModelView.parts(): name must be a str, not int")
            # What is right still works: an integer type other than int, and `in` with another type.
            assert view.array("w", part=np.int64(0)).tolist() == [1.0] * 4
            assert 3 not in view and "w" in view


def test_a_missing_key_file_is_named_and_said_not_to_exist(tmp_path):
    missing = str(tmp_path / "absent.pub")  # was "line 0: File could not be opened for reading"
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, f"key file '{missing}': does not exist"):
        modelcast.load_public_key(missing)


def test_an_empty_key_option_is_refused_not_read_as_none():
    # An unset variable's "" made a plaintext producer or a consumer that pins no producer.
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option 'key_file' is '' (empty)"):
        modelcast.Producer(key_file="", allow_any_consumer=True)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option 'producer_public_key' is ''"):
        modelcast.Consumer("tcp://127.0.0.1:9", model_name="m", producer_public_key="")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option 'key_file' is ''"):
        modelcast.Consumer("tcp://127.0.0.1:9", model_name="m", key_file="")


def test_a_secret_key_given_in_the_wrong_form_is_never_quoted():
    # "option 'key' takes KeyPair, not str ('<the 40 characters of the secret>')": a secret in a
    # log or a traceback pasted into an issue.
    keys = modelcast.generate_key_pair()
    secret = keys.secret_key
    wrong = {
        "Producer key=str": lambda: modelcast.Producer(key=secret, allow_any_consumer=True),
        "Producer key=tuple": lambda: modelcast.Producer(key=(keys.public_key, secret), allow_any_consumer=True),
        "Producer allowed_consumer_keys=str": lambda: modelcast.Producer(key=keys, allowed_consumer_keys=secret),
        "Consumer key=dict": lambda: modelcast.Consumer("tcp://127.0.0.1:9", model_name="m",
                                                        producer_public_key=keys.public_key,
                                                        key={"secret_key": secret}),
        "Consumer key=str with a lone surrogate": lambda: modelcast.Consumer(
            "tcp://127.0.0.1:9", model_name="m", producer_public_key=keys.public_key, key=secret + "\udcff"),
    }
    for name, make in wrong.items():
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option '", "not shown") as info:
            make()
        assert not any(secret[i:i + 8] in str(info.value) for i in range(len(secret) - 7)), (name, str(info.value))


def test_paths_are_str_or_path_objects_and_anything_else_is_named(tmp_path):
    # pathlib.Path was pybind11's TypeError naming no parameter, for the key helpers and the
    # options that take a path.
    keys = modelcast.generate_key_pair()
    modelcast.save_key_pair(keys, tmp_path / "k")
    assert modelcast.load_key_pair(tmp_path / "k").public_key == keys.public_key
    assert modelcast.load_public_key(tmp_path / "k.pub") == keys.public_key
    with modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", key_file=tmp_path / "k",
                            allow_any_consumer=True, persist_directory=tmp_path / "ckpt"):
        assert (tmp_path / "ckpt").is_dir()
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "load_key_pair(): path must be a str, not NoneType"):
        modelcast.load_key_pair(None)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "save_key_pair(): overwrite must be a bool"):
        modelcast.save_key_pair(keys, tmp_path / "k", overwrite="no")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "save_key_pair(): keys must be a KeyPair"):
        modelcast.save_key_pair(None, tmp_path / "j")


def test_a_path_or_name_with_a_nul_byte_is_refused_whole(tmp_path):
    # The system reads a path up to its NUL: "a\0zzz" opened the key file "a", another file
    # than named, and messages quoting such text were cut at the NUL (Python's text stops there).
    keys = modelcast.generate_key_pair()
    modelcast.save_key_pair(keys, str(tmp_path / "a"))
    named = str(tmp_path / "a") + "\0zzz"
    for load in (modelcast.load_public_key, modelcast.load_key_pair):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "a\\x00zzz", "NUL byte"):
            load(named)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "b\\x00evil", "NUL byte"):
        modelcast.save_key_pair(keys, str(tmp_path / "b") + "\0evil")
    assert not (tmp_path / "b").exists()
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "persist.directory", "c\\x00d", "NUL"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", persist_directory=str(tmp_path / "c") + "\0d")
    assert not (tmp_path / "c").exists()
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "dtype 'f32\\x00junk' is not one modelcast carries"):
        modelcast.dtype_size("f32\0junk")


def test_metadata_with_a_nul_byte_is_refused_at_publish(producer):
    # A C consumer read {"k\0secret": ..., "k": ...} as two entries both keyed "k".
    producer.register("w", np.zeros(4, dtype=np.float32))
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "key 'k\\x00secret'", "NUL"):
        producer.publish(1, metadata={"k\0secret": "x", "k": "plain"})
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "value of 'k'", "NUL"):
        producer.publish(1, metadata={"k": "a\0b"})
    assert producer.stats().latest_version == 0


def test_text_utf8_cannot_encode_is_refused_naming_where(producer, endpoint):
    # A lone surrogate (what surrogateescape makes of undecodable bytes) raised pybind11's
    # TypeError or RuntimeError, naming nothing and escaping `except modelcast.Error`.
    lone = "w\udc80"
    weights = np.zeros(4, dtype=np.float32)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "register(): name", "surrogate"):
        producer.register(lone, weights)
    producer.register("w", weights)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "metadata key", "surrogate"):
        producer.publish(1, metadata={lone: 1})
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "metadata value of 'k'", "surrogate"):
        producer.publish(1, metadata={"k": lone})
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option 'model_name'", "surrogate"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", model_name=lone)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "producer_endpoint", "surrogate"):
        modelcast.Consumer("ipc:///tmp/" + lone)
    with modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        view = consumer.wait_for_version(producer.publish(1).version, WAIT_S)
        assert view is not None
        assert lone not in view and "w" in view
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "name", "lone surrogate"):
            view.array(lone)


def test_bad_endpoints_and_options():
    with raises(modelcast.Error, ErrorCode.INVALID_ARGUMENT, "udp://"):
        modelcast.Producer(control_endpoint="udp://127.0.0.1:9")
    with raises(modelcast.Error, ErrorCode.INVALID_ARGUMENT):
        modelcast.Consumer("not an endpoint")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "snapshot_slot"):
        modelcast.Producer(snapshot_slot=3)  # misspelt option
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", snapshot_slots=1)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "device_stage_bytes"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", device_stage_bytes=4096)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "run_id", "control character"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", rank=1, rank_count=2, run_id="job\n1")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "run_id", "(empty)"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", rank=1, rank_count=2, run_id="")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "on_update", "str"):
        modelcast.Consumer("tcp://127.0.0.1:9", on_update="print")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "f99"):
        modelcast.TensorSpec("x", "f99", [1])


def test_options_of_the_wrong_type_or_range_are_refused_naming_them():
    # pybind11's own TypeError named neither the option nor the entry.
    cases = [
        (dict(buffers=-1), "option 'buffers' is out of range (-1)"),
        (dict(buffers=2**70), "option 'buffers' is out of range"),
        (dict(buffers="3"), "option 'buffers' takes int, not str"),
        (dict(wants=5), "wants is a dict"),
        (dict(wants={"w": ("shard", "a", 0, 2)}), "the want of 'w': dim must be an integer, got 'a'"),
        (dict(wants={"w": ("shard", 0, 0)}), "the want of 'w': ('shard', dim, index, count), got ('shard', 0, 0)"),
        (dict(wants={"w": [(0,)]}), "the want of 'w': box 0 is (0,), not (offset, extent)"),
        (dict(wants={"w": [(["a"], [1])]}), "the want of 'w': box 0 offset[0] must be an integer, got 'a'"),
        (dict(conversions=3), "conversions is a dict"),
        (dict(conversions=[("w",)]), "the conversion ('w',) is not (name, dtype)"),
        (dict(conversions=[("w", "f16", "x")]), "the conversion of 'w': fp8_block must be an integer, got 'x'"),
        # Each was "an element of the wrong type (sizes and indices are ints)", or taken cut short.
        (dict(wants={"w": ("shard", 0, -1, 2)}), "the want of 'w': index must be at least 0, got -1"),
        (dict(wants={"w": ("shard", 0, 0, 0)}), "the want of 'w': count must be at least 1, got 0"),
        (dict(wants={5: "whole"}), "a name in wants must be a str, not int"),
        (dict(wants={"w": [(["0"], [2.5])]}), "box 0 offset[0] must be an integer, got '0'"),
        (dict(conversions=[("*", "f8e4m3", -1)]), "the conversion of '*': fp8_block must be at least 0, got -1"),
        (dict(expected_layout=[("a", "f32", [2.7])]), "expected_layout: shape of 'a'[0] must be an integer, got 2.7"),
        (dict(buffers=True), "option 'buffers' takes int, not bool"),
        # NumPy's bool too, and a boolean 0-d array: operator.index takes them as 0 or 1.
        (dict(buffers=np.True_), "option 'buffers' takes int, not bool"),
        (dict(wants={"w": ("shard", 0, np.array(True), 2)}), "the want of 'w': index must be an integer"),
        # pybind11 took None as False and any number as a switch (serve_peers=None turned relaying off).
        (dict(serve_peers=None), "option 'serve_peers' takes True or False, not NoneType"),
        (dict(allow_plaintext_remote=-1), "option 'allow_plaintext_remote' takes True or False, not int"),
    ]
    for case in cases:
        options, *words = case
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, *words):
            modelcast.Consumer("tcp://127.0.0.1:9", **options)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option 'snapshot_slots' takes int"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", snapshot_slots=2.5)
    # integrity=None turned the producer's digests off, allow_any_consumer=2**70 turned it on.
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option 'integrity' takes True or False, not NoneType"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", integrity=None)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "option 'allow_any_consumer' takes True or False"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", allow_any_consumer=2**70)
    # NumPy's bool is a bool here.
    modelcast.Consumer("tcp://127.0.0.1:9", serve_peers=np.bool_(False)).close()
    # NumPy's ints are ints here as elsewhere, and a shard may be written as a list.
    for want in (("shard", np.int64(0), np.int32(1), 2), ["shard", 0, 1, 2]):
        modelcast.Consumer("tcp://127.0.0.1:9", wants={"w": want}).close()


def test_durations_take_int_and_float_seconds_and_timedelta(producer, endpoint):
    # An int once raised TypeError (pybind11 takes float or timedelta only), for the options
    # without naming which.
    import datetime
    with modelcast.Consumer(endpoint, model_name="pytest", producer_timeout=3, transfer_timeout=2.5) as c:
        assert c.wait_for_version(1, timeout=0) is None
        assert c.wait_for_version(1, timeout=datetime.timedelta(milliseconds=1)) is None
        # Float seconds were cut to whole milliseconds: 0.0019 s waited 1 ms, 0.0009 s not at all.
        started = time.monotonic()
        assert c.wait_for_version(1, timeout=0.0019) is None
        assert time.monotonic() - started >= 0.0019
    # ... and a binary fraction fell short of its millisecond: 1.001 s was 1000 ms.
    options = modelcast._service.options_from(modelcast._core.ConsumerOptions, {"producer_timeout": 1.001,
                                                                             "transfer_timeout": 0.0009}, "test")
    assert options.producer_timeout == datetime.timedelta(milliseconds=1001)
    assert options.transfer_timeout == datetime.timedelta(milliseconds=1)
    assert producer.wait_for_consumers(5, timeout=0) is False
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "producer_timeout", "str"):
        modelcast.Consumer(endpoint, producer_timeout="3")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "timeout", "negative"):
        producer.wait_for_consumers(1, timeout=-1)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "lease_timeout", "bool"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", lease_timeout=True)
    # nan, infinite and zero durations were accepted and delivered nothing, saying nothing.
    for bad, words in ((float("nan"), "not a number"), (float("inf"), "at most"), (0, "between 1 ms")):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "lease_timeout", words):
            modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", lease_timeout=bad)
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "producer_timeout", words):
            modelcast.Consumer(endpoint, producer_timeout=bad)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "timeout", "not a number"):
        producer.wait_for_consumers(1, timeout=float("nan"))
    # A number past a float's range was a bare OverflowError: a wait waits its longest, an option
    # is refused by name.
    import fractions
    assert producer.wait_for_consumers(0, timeout=10**400) is True
    assert producer.wait_for_consumers(0, timeout=fractions.Fraction(10**400)) is True
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "lease_timeout", "at most"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", lease_timeout=10**400)


def test_an_infinite_wait_waits(producer, endpoint):
    # inf once overflowed the library's clock and returned False at once.
    joined = []
    waiter = threading.Thread(target=lambda: joined.append(producer.wait_for_consumers(1, timeout=float("inf"))))
    waiter.start()
    with modelcast.Consumer(endpoint, model_name="pytest"):
        waiter.join(WAIT_S)
        assert joined == [True]


def test_a_tensor_spec_whose_size_cannot_be_counted_is_refused():
    # size_bytes once wrapped: 0 for [-1], 4 for [2**63 - 1, 2**63 - 1].
    for shape in ([-1], [2**62, 8], [2**63 - 1, 2**63 - 1]):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "64 bits"):
            modelcast.TensorSpec("x", "f32", shape)
    assert modelcast.TensorSpec("x", "f32", [2, 3]).size_bytes == 24


def test_a_tensor_spec_and_dtype_size_take_arguments_as_the_rest_of_the_package_does():
    # A shape of [True] was [1] without a word; a float, NumPy and torch dtypes and a huge extent
    # were pybind11's TypeError, naming no argument.
    for shape, words in (([True], "shape of 'x'[0] must be an integer"), ([2.5], "shape of 'x'[0] must be an integer"),
                         ([2**63], "at most"), (3, "must be a sequence of integers")):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, words):
            modelcast.TensorSpec("x", "f32", shape)
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "name must be a str"):
        modelcast.TensorSpec(b"x", "f32", [1])
    assert modelcast.TensorSpec("x", np.float32, np.array([2, 3])).dtype == "f32"
    assert modelcast.TensorSpec("x", torch.bfloat16, torch.Size([4])).size_bytes == 8
    assert modelcast.dtype_size(torch.float32) == 4 and modelcast.dtype_size(np.int8) == 1
    assert modelcast.dtype_size("f16") == 2
    # None is float64 to NumPy; a bad structured dtype was NumPy's bare ValueError.
    for bad in (np.complex64, None, ("f4", -1)):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "is not one modelcast carries"):
            modelcast.dtype_size(bad)
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "is not one modelcast carries"):
            modelcast.TensorSpec("x", bad, [1])


def test_an_interface_claiming_a_size_past_64_bits_or_a_negative_extent_is_refused_naming_the_tensor(producer):
    # Once a TypeError from the binding, for a byte count past 64 bits.
    class Claimed:
        def __init__(self, shape):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (4096, False), "version": 3}

    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "tensor 'huge'", "64 bits"):
        producer.register("huge", Claimed((2**62, 8)))
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "tensor 'backwards'", "negative extent"):
        producer.register("backwards", Claimed((-1, -1)))


def test_an_exporter_answering_nonsense_is_refused_naming_the_tensor(producer):
    # Each was a raw TypeError or ValueError (unpacking, pybind11) naming neither the tensor nor the call.
    class Exporter:
        def __init__(self, device, capsule=None):
            self.device, self.capsule = device, capsule

        def __dlpack_device__(self):
            return self.device

        def __dlpack__(self, stream=None):
            return self.capsule

    for device in (("a", "b"), (1, 0, 0), None):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "tensor 'x'",
                    "__dlpack_device__() returned"):
            producer.register("x", Exporter(device))
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "tensor 'x'",
                "__dlpack__() returned a int, not a DLPack capsule"):
        producer.register("x", Exporter((1, 0), 5))

    class Pointer:
        def __init__(self, address):
            self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (address, False), "version": 3}

    for address in (-1, 2**70):
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "tensor 'p'", "is not an address"):
            producer.register("p", Pointer(address))


def test_persist_options_are_checked_at_construction(tmp_path):
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "persist.every"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", persist_directory=str(tmp_path), persist_every=0)
    (tmp_path / "a-file").write_text("")
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "persist.directory", "a-file"):
        modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", persist_directory=str(tmp_path / "a-file" / "x"))
    with modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", persist_directory=str(tmp_path / "ckpt"),
                            persist_every=2, persist_keep=2) as p:
        assert (tmp_path / "ckpt").is_dir()  # created when the option is checked
        stats = p.stats()
        assert (stats.persisted_versions, stats.persist_failures, stats.persist_skipped) == (0, 0, 0)


def test_layout_mismatch_is_reported_to_on_error(endpoint):
    errors, reported = [], threading.Event()

    def on_error(error):
        errors.append(error)
        reported.set()

    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
         modelcast.Consumer(endpoint, model_name="pytest", on_error=on_error,
                            expected_layout=[("w", np.float32, (4,))]) as consumer:
        producer.register("w", np.ones(3, dtype=np.float32))  # 3 elements, the consumer expects 4
        producer.publish(1)
        assert reported.wait(WAIT_S), "the mismatching version was not reported"
        assert consumer.stats().versions_rejected == 1  # counted before on_error runs
        assert consumer.acquire() is None  # nothing installed
        assert errors and isinstance(errors[0], modelcast.LayoutMismatchError)
        assert errors[0].code == ErrorCode.LAYOUT_MISMATCH and "w" in str(errors[0])


def test_missing_tensor_in_a_view(endpoint):
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
         modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        producer.register("w", np.ones(3, dtype=np.float32))
        view = consumer.wait_for_version(producer.publish(1).version, WAIT_S)
        with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "absent"):
            view.array("absent")
        assert "absent" not in view and "w" in view


def test_a_join_for_another_model_is_refused_told_why_and_counted(endpoint):
    errors, reported = [], threading.Event()

    def on_error(error):
        errors.append(error)
        reported.set()

    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
         modelcast.Consumer(endpoint, model_name="other", on_error=on_error) as consumer:
        assert reported.wait(WAIT_S), "the refused join was not reported"
        # The producer counts a refusal before it replies, so the consumer's error comes after.
        assert producer.stats().refused_joins >= 1
        assert producer.stats().consumers == 0
        assert "serves model 'pytest', not 'other'" in str(errors[0])
        assert not consumer.stats().producer_connected


def test_classes_only_the_library_makes_cannot_be_made_bare():
    # Cls.__new__(Cls) made an object with no C++ value behind it: reading it crashed the process
    # (a ConsumerStats' repr) or returned garbage (a ModelView's version, a PublishTicket's).
    from modelcast import _core
    for cls in (modelcast.ModelView, modelcast.ConsumerStats, modelcast.ProducerStats, _core.ViewTensor,
                _core.PublishTicket, _core.Delivery):
        with pytest.raises(TypeError):
            cls.__new__(cls)
        with pytest.raises(TypeError):
            cls()


def test_classes_with_a_constructor_cannot_be_made_bare_and_are_still_made_and_subclassed():
    # Cls.__new__(Cls) of a class with a constructor skipped it: reading a ConsumerOptions' string,
    # a TensorSpec's size or a predictor option crashed the process (SIGSEGV).
    from modelcast import _core
    for cls in (_core.ConsumerOptions, _core.TensorSpec, _core._Producer, _core._Consumer,
                _core.predictor.ForecastOptions, _core.predictor.OnlineScheduler):
        with pytest.raises(TypeError, match=r"\.__new__\(\) would make an object with no value: call .*\(\.\.\.\)"):
            cls.__new__(cls)
    assert _core.ConsumerOptions().model_name == "model"
    assert _core.TensorSpec("w", "f32", [2, 3]).size_bytes == 24

    class Options(_core.predictor.ForecastOptions):
        def __init__(self):
            super().__init__()
            self.label = "mine"
    options = Options()
    assert options.label == "mine" and options.future_steps == _core.predictor.ForecastOptions().future_steps

    class Forgetful(_core.predictor.ForecastOptions):
        def __init__(self):
            pass
    with pytest.raises(TypeError, match="must be called"):
        Forgetful()


def test_a_producer_or_consumer_is_neither_pickled_nor_copied(endpoint):
    # copy.copy once returned a second object sharing the first one's native part (closing either
    # closed both), and pickle named a private type.
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
            modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        for obj, what in ((producer, "Producer"), (consumer, "Consumer")):
            for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
                with pytest.raises(TypeError, match=f"a {what} cannot be pickled or copied: it owns library threads"):
                    attempt(obj)
        assert producer.stats().versions_published == 0 and consumer.stats() is not None  # both still usable


def test_an_async_callback_and_an_array_in_metadata_are_refused_naming_them(endpoint, producer):
    # An async callback made a coroutine nothing awaited (it never ran); an array's str() sent a
    # few of its values and "..." for the rest.
    async def on_update(view):
        pass

    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "on_update is an async function",
                "call_soon_threadsafe"):
        modelcast.Consumer(endpoint, model_name="pytest", on_update=on_update)
    producer.register("w", np.zeros(4, dtype=np.float32))
    with raises(modelcast.InvalidArgumentError, ErrorCode.INVALID_ARGUMENT, "metadata value of 'lr'", "is an array"):
        producer.publish(1, {"lr": np.linspace(0, 1, 2000)})
    assert producer.publish(1, {"lr": np.float32(0.5), "note": "ok"}).version >= 1


def test_publishes_from_several_threads_at_once_never_share_a_version(producer):
    # publish() is one thread at a time; several at once took the same version number and moved
    # the newest version backwards, without a word. A call while another runs is refused now.
    # Whether two calls overlap in the few instructions that take a version number is up to the
    # scheduler: without the refusal, about half the runs here gave two publishes one number.
    w = np.zeros(1 << 20, dtype=np.float32)  # a copy long enough for calls to overlap
    producer.register("w", w)
    versions, refused, other = [], [], []

    def publish_many(first):
        for step in range(first, first + 2500):
            try:
                versions.append(producer.publish(step).version)
            except modelcast.StateError as e:
                refused.append(str(e))
            except Exception as e:  # noqa: BLE001 - reported below
                other.append(repr(e))

    threads = [threading.Thread(target=publish_many, args=(10000 * k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not other
    assert len(versions) == len(set(versions)), "two publishes took one version number"
    assert len(versions) + len(refused) == 10000
    assert all("another publish() of this producer runs" in r for r in refused)
