"""A consumer that serves tensors in another dtype: each version is checked as the producer sent it
and converted after. The widening and narrowing results are compared with torch's own conversions
(both round to nearest even), the fp8 codes through their scale with the producer's values."""

import numpy as np
import pytest
import torch

import modelcast
from conftest import WAIT_S


def e4m3_value(code):
    """The value of one fp8 e4m3 (E4M3FN) code, from the format's definition."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return float("nan")
    if exponent == 0:
        return sign * mantissa / 8.0 * 2.0 ** -6
    return sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)


def test_views_hold_the_tensors_in_the_dtypes_asked_for(endpoint):
    torch.manual_seed(3)
    w = torch.randn(1000) * 5
    h = torch.randn(64, 3).to(torch.float16)
    idx = torch.arange(10, dtype=torch.int32)
    with modelcast.Producer(control_endpoint=endpoint, model_name="conv") as producer:
        producer.register("w", w)
        producer.register("h", h)
        producer.register("idx", idx)
        producer.prepare()
        conversions = {"w": "f8e4m3", "*": torch.bfloat16}
        with modelcast.Consumer(endpoint, model_name="conv", conversions=conversions) as consumer:
            version = producer.publish(1).version
            view = consumer.wait_for_version(version, WAIT_S)
            assert view is not None, consumer.stats().last_error
            got_h = view.tensor("h")
            assert got_h.dtype == torch.bfloat16
            assert torch.equal(got_h.view(torch.int16), h.to(torch.bfloat16).view(torch.int16))
            assert torch.equal(view.tensor("idx"), idx)
            assert view.spec("w").dtype == "f8e4m3"
            codes = view.array("w")
            assert codes.dtype == np.uint8 and codes.shape == (1000,)
            scales, block = view.scales("w")
            assert block == 0 and len(scales) == 1
            assert scales[0] == pytest.approx(float(w.abs().max()) / 448.0, rel=1e-6)
            decoded = np.array([e4m3_value(int(c)) for c in codes]) * scales[0]
            # e4m3 keeps 3 mantissa bits: within half a step (1/16 relative) of each value, or
            # of the smallest subnormal step (times the scale) near zero.
            tolerance = np.maximum(np.abs(w.numpy()) / 16.0, 2.0 ** -10 * scales[0])
            assert np.all(np.abs(decoded - w.numpy()) <= tolerance * 1.0001)
            assert view.scales("h") == ([], 0)


def test_a_conversion_to_a_dtype_that_is_not_a_float_is_refused(endpoint):
    with pytest.raises(modelcast.InvalidArgumentError) as error:
        modelcast.Consumer(endpoint, model_name="conv", conversions=[("w", "i32")])
    assert "'w'" in str(error.value)
