"""Fashion-MNIST for the example: the data as Debian's dataset-fashion-mnist installs it, and the
small network both the trainer and the inference server build.

The files are IDX (the MNIST format: big-endian header, then raw uint8), gzip-compressed; NumPy
reads them in a few lines, so no dataset library is needed.
"""

import gzip
import os

import numpy as np
import torch

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian: dataset-fashion-mnist
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot")


def _read_idx(path, header_words):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    header = np.frombuffer(raw, dtype=">u4", count=header_words)
    return header, np.frombuffer(raw, dtype=np.uint8, offset=4 * header_words)


def load(split, data_dir=DATA_DIR):
    """(images as float32 [n, 784] in [0, 1], labels as int64 [n]) of split 'train' or 't10k'.

    Raises FileNotFoundError naming the file and the Debian package when the data is missing.
    """
    images_path = os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz")
    labels_path = os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz")
    for path in (images_path, labels_path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing: apt-get install dataset-fashion-mnist")
    header, pixels = _read_idx(images_path, 4)
    if header[0] != 2051:
        raise ValueError(f"{images_path}: not an IDX image file (magic {header[0]})")
    count, rows, cols = (int(v) for v in header[1:])
    images = pixels.reshape(count, rows * cols).astype(np.float32) / 255.0
    header, labels = _read_idx(labels_path, 2)
    if header[0] != 2049 or int(header[1]) != count:
        raise ValueError(f"{labels_path}: not the labels of {images_path}")
    return images, labels.astype(np.int64)


def make_model():
    """The network the trainer trains: a small multi-layer perceptron, 784 -> 128 -> 10."""
    return torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def forward(weights, images):
    """make_model()'s forward pass with the weights given as {name: tensor} (e.g. a ModelView's
    state_dict()), used where they are. The server uses this rather than torch 1.13's
    functional_call, which leaves the tensors in a reference cycle until the garbage collector
    runs: that would keep old versions' receive buffers held and stall updates."""
    hidden = torch.relu(torch.nn.functional.linear(images, weights["0.weight"], weights["0.bias"]))
    return torch.nn.functional.linear(hidden, weights["2.weight"], weights["2.bias"])
