"""Image data sets read from their published file formats into uint8 tensors.

The readers parse the formats directly (CIFAR's pickled batches, SVHN's .mat,
STL-10's binary, MNIST's IDX, Tiny-ImageNet's folders); torchvision is used
only to download, when ``data.download`` is true. A missing data set is a
:class:`DataError` that says where it looked and how to get the files.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import torch

from engine.data.tensors import DataError, TensorData

Loaded = tuple[TensorData, TensorData, list[str]]

EXPECTED = {
    "mnist": "MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte",
    "fashion_mnist": "FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte",
    "cifar10": "cifar-10-batches-py/ (data_batch_1..5, test_batch, batches.meta)",
    "cifar100": "cifar-100-python/ (train, test, meta)",
    "svhn": "train_32x32.mat and test_32x32.mat",
    "stl10": "stl10_binary/ (train_X.bin, train_y.bin, test_X.bin, test_y.bin, class_names.txt)",
    "tiny_imagenet": "tiny-imagenet-200/train/<wnid>/... and tiny-imagenet-200/val/ (class folders, or "
                     "images/ with val_annotations.txt)",
}
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot"]
IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}


def _data(x: np.ndarray, y) -> TensorData:
    return TensorData(torch.from_numpy(np.array(x, dtype=np.uint8, order="C")),
                      torch.tensor(np.asarray(y), dtype=torch.long))  # a copy: IDX labels are read-only


def _unpickle(path: Path) -> dict:
    with open(path, "rb") as fh:
        return pickle.load(fh, encoding="latin1")


def read_cifar(root: Path, hundred: bool) -> Loaded:
    base = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    train_files = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    label_key = "fine_labels" if hundred else "labels"

    def read(files: list[str]) -> TensorData:
        parts = [_unpickle(base / f) for f in files]
        x = np.concatenate([p["data"] for p in parts]).reshape(-1, 3, 32, 32)  # [N, 3, 32, 32]
        return _data(x, np.concatenate([p[label_key] for p in parts]))

    meta = _unpickle(base / ("meta" if hundred else "batches.meta"))
    names = meta["fine_label_names" if hundred else "label_names"]
    return read(train_files), read(["test" if hundred else "test_batch"]), list(names)


def read_svhn(root: Path) -> Loaded:
    from scipy.io import loadmat

    def read(split: str) -> TensorData:
        mat = loadmat(root / f"{split}_32x32.mat")
        y = mat["y"].astype(np.int64).squeeze(1)
        y[y == 10] = 0  # the format stores digit 0 as label 10
        return _data(mat["X"].transpose(3, 2, 0, 1), y)  # [32, 32, 3, N] -> [N, 3, 32, 32]

    return read("train"), read("test"), [str(i) for i in range(10)]


def read_stl10(root: Path) -> Loaded:
    base = root / "stl10_binary"

    def read(split: str) -> TensorData:
        x = np.fromfile(base / f"{split}_X.bin", dtype=np.uint8).reshape(-1, 3, 96, 96).transpose(0, 1, 3, 2)
        y = np.fromfile(base / f"{split}_y.bin", dtype=np.uint8).astype(np.int64) - 1  # labels are 1..10
        return _data(x, y)

    names = (base / "class_names.txt").read_text().split()
    return read("train"), read("test"), names


def _read_idx(path: Path) -> np.ndarray:
    """An IDX file (MNIST's format), plain or gzipped."""
    if not path.exists() and path.with_suffix(path.suffix + ".gz").exists():
        path = path.with_suffix(path.suffix + ".gz")
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def read_mnist(root: Path, fashion: bool) -> Loaded:
    base = root / ("FashionMNIST" if fashion else "MNIST") / "raw"

    def read(prefix: str) -> TensorData:
        x = _read_idx(base / f"{prefix}-images-idx3-ubyte")[:, None]  # [N, 1, 28, 28]
        return _data(x, _read_idx(base / f"{prefix}-labels-idx1-ubyte"))

    names = FASHION_CLASSES if fashion else [str(i) for i in range(10)]
    return read("train"), read("t10k"), names


def _read_images(paths: list[Path]) -> np.ndarray:
    from PIL import Image

    out = [np.asarray(Image.open(p).convert("RGB"), dtype=np.uint8).transpose(2, 0, 1) for p in paths]
    return np.stack(out) if out else np.zeros((0, 3, 64, 64), dtype=np.uint8)


def _images_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)


def read_tiny_imagenet(root: Path) -> Loaded:
    """Tiny-ImageNet-200 as distributed (val/images + val_annotations.txt) or with val/ in class folders."""
    base = root / "tiny-imagenet-200"
    if not (base / "train").is_dir():
        raise FileNotFoundError(base / "train")
    wnids = sorted(d.name for d in (base / "train").iterdir() if d.is_dir())
    index = {w: i for i, w in enumerate(wnids)}

    def from_folders(split: str) -> tuple[list[Path], list[int]]:
        paths, labels = [], []
        for w in wnids:
            found = _images_under(base / split / w)
            paths += found
            labels += [index[w]] * len(found)
        return paths, labels

    train_paths, train_y = from_folders("train")
    annotations = base / "val" / "val_annotations.txt"
    if annotations.exists():
        rows = [line.split("\t") for line in annotations.read_text().splitlines() if "\t" in line]
        val_paths = [base / "val" / "images" / r[0] for r in rows]
        val_y = [index[r[1]] for r in rows]
    else:
        val_paths, val_y = from_folders("val")
    names = wnids
    words = base / "words.txt"
    if words.exists():
        lookup = dict(line.split("\t", 1) for line in words.read_text().splitlines() if "\t" in line)
        names = [lookup.get(w, w).split(",")[0].strip() for w in wnids]
    return _data(_read_images(train_paths), train_y), _data(_read_images(val_paths), val_y), names


READERS = {
    "mnist": lambda root: read_mnist(root, fashion=False),
    "fashion_mnist": lambda root: read_mnist(root, fashion=True),
    "cifar10": lambda root: read_cifar(root, hundred=False),
    "cifar100": lambda root: read_cifar(root, hundred=True),
    "svhn": read_svhn,
    "stl10": read_stl10,
    "tiny_imagenet": read_tiny_imagenet,
}


def broken_torchvision(err: BaseException) -> str:
    """What an import of torchvision that fails means: it is missing, or built for another torch (a pair that
    does not load: "operator torchvision::nms does not exist"), and how to install a pair that loads."""
    import torch

    what = "is not installed" if isinstance(err, ModuleNotFoundError) else \
        f"does not load with torch {torch.__version__} ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    return (f"torchvision {what}; it is needed only to download a data set. Install the torchvision built for this "
            "torch (pip install torchvision, which picks the matching version), or copy the data set's files "
            "into data.root and download nothing")


def download(name: str, root: Path) -> None:
    """Fetch a data set with torchvision into ``root`` (needs network access)."""
    try:
        from torchvision import datasets as tvd
    except Exception as err:  # noqa: BLE001 - a torchvision built for another torch fails in many ways
        raise DataError(broken_torchvision(err)) from None

    if name == "tiny_imagenet":
        raise DataError("Tiny-ImageNet has no torchvision download: get tiny-imagenet-200.zip from the "
                        f"CS231n site and unzip it into {root.resolve()}")
    fetch = {
        "mnist": lambda: [tvd.MNIST(root, train=t, download=True) for t in (True, False)],
        "fashion_mnist": lambda: [tvd.FashionMNIST(root, train=t, download=True) for t in (True, False)],
        "cifar10": lambda: tvd.CIFAR10(root, download=True),
        "cifar100": lambda: tvd.CIFAR100(root, download=True),
        "svhn": lambda: [tvd.SVHN(root, split=s, download=True) for s in ("train", "test")],
        "stl10": lambda: tvd.STL10(root, split="train", download=True),
    }
    fetch[name]()


def load_vision(name: str, root: Path, want_download: bool) -> Loaded:
    try:
        return READERS[name](root)
    except (FileNotFoundError, OSError, KeyError, ValueError, pickle.UnpicklingError) as err:
        if not want_download:
            raise DataError(f"data set {name!r} not found under {root.resolve()} ({err}): set data.download = "
                            "true (or --set data.download=true) on a machine with network access, or copy "
                            f"the files to {root.resolve()}/{EXPECTED[name]}") from None
    try:
        download(name, root)
    except DataError:
        raise
    except Exception as err:
        raise DataError(f"downloading {name!r} into {root.resolve()} failed ({err}); copy the files to "
                        f"{root.resolve()}/{EXPECTED[name]}") from None
    return READERS[name](root)
