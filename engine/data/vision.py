"""torchvision data sets (and Tiny-ImageNet from folders), loaded into memory as uint8 tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.data.datasets import DataError, TensorData

HOW_TO_GET = {
    "mnist": "MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte",
    "fashion_mnist": "FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte",
    "cifar10": "cifar-10-batches-py/ (the python version of CIFAR-10)",
    "cifar100": "cifar-100-python/ (the python version of CIFAR-100)",
    "svhn": "train_32x32.mat and test_32x32.mat",
    "stl10": "stl10_binary/ (train_X.bin, train_y.bin, test_X.bin, test_y.bin, class_names.txt)",
    "tiny_imagenet": "tiny-imagenet-200/train/<wnid>/... and tiny-imagenet-200/val/ (class folders, or "
                     "images/ with val_annotations.txt)",
}


def _missing(name: str, root: Path, download: bool, err: Exception) -> DataError:
    how = ("set data.download = true (or --set data.download=true) on a machine with network access, "
           f"or copy the files to {root}/{HOW_TO_GET[name]}")
    if download:
        how = f"the download failed ({err}); copy the files to {root}/{HOW_TO_GET[name]}"
    return DataError(f"data set {name!r} not found under {root.resolve()}: {how}")


def _as_data(x: np.ndarray | torch.Tensor, y) -> TensorData:
    return TensorData(torch.as_tensor(np.asarray(x), dtype=torch.uint8).contiguous(),
                      torch.as_tensor(np.asarray(y), dtype=torch.long))


def _torchvision(name: str, root: Path, download: bool) -> tuple[TensorData, TensorData, list[str]]:
    from torchvision import datasets as tvd

    if name in ("mnist", "fashion_mnist"):
        cls = tvd.MNIST if name == "mnist" else tvd.FashionMNIST
        tr, te = cls(root, train=True, download=download), cls(root, train=False, download=download)
        return _as_data(tr.data.unsqueeze(1), tr.targets), _as_data(te.data.unsqueeze(1), te.targets), \
            list(tr.classes)
    if name in ("cifar10", "cifar100"):
        cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
        tr, te = cls(root, train=True, download=download), cls(root, train=False, download=download)
        hwc = lambda d: np.ascontiguousarray(d.data.transpose(0, 3, 1, 2))  # noqa: E731  [N, 3, 32, 32]
        return _as_data(hwc(tr), tr.targets), _as_data(hwc(te), te.targets), list(tr.classes)
    if name == "svhn":
        tr = tvd.SVHN(root, split="train", download=download)
        te = tvd.SVHN(root, split="test", download=download)
        return _as_data(tr.data, tr.labels), _as_data(te.data, te.labels), [str(i) for i in range(10)]
    if name == "stl10":
        tr = tvd.STL10(root, split="train", download=download)
        te = tvd.STL10(root, split="test", download=download)
        return _as_data(tr.data, tr.labels), _as_data(te.data, te.labels), list(tr.classes)
    raise ValueError(name)


def _read_images(paths: list[Path]) -> torch.Tensor:
    from PIL import Image

    out = [np.asarray(Image.open(p).convert("RGB"), dtype=np.uint8).transpose(2, 0, 1) for p in paths]
    return torch.from_numpy(np.stack(out)) if out else torch.zeros(0, 3, 64, 64, dtype=torch.uint8)


IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}


def _images_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)


def tiny_imagenet(root: Path) -> tuple[TensorData, TensorData, list[str]]:
    """Tiny-ImageNet-200 as downloaded (train/<wnid>/images, val/images + val_annotations.txt)
    or with val/ already sorted into class folders."""
    base = root / "tiny-imagenet-200"
    if not (base / "train").is_dir():
        raise FileNotFoundError(base / "train")
    wnids = sorted(d.name for d in (base / "train").iterdir() if d.is_dir())
    index = {w: i for i, w in enumerate(wnids)}
    train_paths, train_y = [], []
    for w in wnids:
        paths = _images_under(base / "train" / w)
        train_paths += paths
        train_y += [index[w]] * len(paths)
    annotations = base / "val" / "val_annotations.txt"
    if annotations.exists():
        val_paths, val_y = [], []
        for line in annotations.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 2:
                val_paths.append(base / "val" / "images" / parts[0])
                val_y.append(index[parts[1]])
    else:
        val_paths, val_y = [], []
        for w in wnids:
            paths = _images_under(base / "val" / w)
            val_paths += paths
            val_y += [index[w]] * len(paths)
    names = wnids
    words = base / "words.txt"
    if words.exists():
        lookup = dict(line.split("\t", 1) for line in words.read_text().splitlines() if "\t" in line)
        names = [lookup.get(w, w).split(",")[0].strip() for w in wnids]
    return (TensorData(_read_images(train_paths), torch.tensor(train_y, dtype=torch.long)),
            TensorData(_read_images(val_paths), torch.tensor(val_y, dtype=torch.long)), names)


def load_vision(name: str, root: Path, download: bool) -> tuple[TensorData, TensorData, list[str]]:
    try:
        if name == "tiny_imagenet":
            if download:
                raise DataError("Tiny-ImageNet has no torchvision download: get tiny-imagenet-200.zip from "
                                f"the CS231n site and unzip it into {root.resolve()}")
            return tiny_imagenet(root)
        return _torchvision(name, root, download)
    except DataError:
        raise
    except (RuntimeError, FileNotFoundError, OSError) as err:
        raise _missing(name, root, download, err) from None
