"""A producer and a consumer in one interpreter exchange one version of a 64 MiB model, then the
interpreter exits without closing either (as a script that ends does). UCX reports objects "not
returned to mpool" on stderr at exit where it still holds some; run.sh counts those lines.

Usage: python_exit.py ENDPOINT (PYTHONPATH: the build's python/ folder)."""

import sys

import numpy as np

import modelcast

tensors = {"w": np.ones(16 << 20, dtype=np.float32)}
producer = modelcast.Producer(control_endpoint=sys.argv[1], model_name="exit")
producer.register_all(tensors)
producer.prepare()
consumer = modelcast.Consumer(sys.argv[1], model_name="exit")
version = producer.publish(1).version
view = consumer.wait_for_version(version, 20.0)
assert view is not None and view.version == version, "the version did not arrive"
print("installed", view.version, flush=True)
