"""Data: the loaders read small files written here in each published format; splits are balanced."""

import pickle

import numpy as np
import pytest
import torch

from engine.contract.config import DataConfig
from engine.data import DataError, load_splits
from engine.data.augment import random_crop_flip

RNG = np.random.default_rng(0)


def write_cifar(root, hundred=False, n_train=50, n_test=20, k=10):
    base = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    base.mkdir(parents=True)
    key = "fine_labels" if hundred else "labels"
    images = {}

    def batch(name, n):
        x = RNG.integers(0, 256, (n, 3072), dtype=np.uint8)
        y = list(np.arange(n) % k)
        images[name] = (x, y)
        with open(base / name, "wb") as fh:
            pickle.dump({"data": x, key: y}, fh)

    if hundred:
        batch("train", n_train)
        batch("test", n_test)
        meta = {"fine_label_names": [f"c{i}" for i in range(k)]}
    else:
        for i in range(1, 6):
            batch(f"data_batch_{i}", n_train // 5)
        batch("test_batch", n_test)
        meta = {"label_names": [f"c{i}" for i in range(k)]}
    with open(base / ("meta" if hundred else "batches.meta"), "wb") as fh:
        pickle.dump(meta, fh)
    return images


def write_idx(path, array, magic_dims):
    header = bytes([0, 0, 8, magic_dims]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist(root, folder="MNIST"):
    base = root / folder / "raw"
    base.mkdir(parents=True)
    for prefix, n in (("train", 50), ("t10k", 20)):
        write_idx(base / f"{prefix}-images-idx3-ubyte", RNG.integers(0, 256, (n, 28, 28)), 3)
        write_idx(base / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10, 1)


def write_svhn(root):
    from scipy.io import savemat

    for split, n in (("train", 40), ("test", 20)):
        y = (np.arange(n) % 10)
        y[y == 0] = 10  # SVHN stores digit 0 as 10
        savemat(root / f"{split}_32x32.mat", {"X": RNG.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                                              "y": y[:, None]})


def write_stl10(root):
    base = root / "stl10_binary"
    base.mkdir(parents=True)
    for split, n in (("train", 20), ("test", 10)):
        RNG.integers(0, 256, n * 3 * 96 * 96, dtype=np.uint8).tofile(base / f"{split}_X.bin")
        (np.arange(n) % 10 + 1).astype(np.uint8).tofile(base / f"{split}_y.bin")
    (base / "class_names.txt").write_text("\n".join(f"s{i}" for i in range(10)))


def write_tiny_imagenet(root, annotated_val=True):
    from PIL import Image

    base = root / "tiny-imagenet-200"
    wnids = ["n01", "n02", "n03"]
    for w in wnids:
        (base / "train" / w / "images").mkdir(parents=True)
        for i in range(4):
            Image.fromarray(RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
                base / "train" / w / "images" / f"{w}_{i}.JPEG", format="JPEG")
    (base / "val" / "images").mkdir(parents=True)
    lines = []
    for i in range(6):
        Image.fromarray(RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
            base / "val" / "images" / f"val_{i}.JPEG", format="JPEG")
        lines.append(f"val_{i}.JPEG\t{wnids[i % 3]}\t0\t0\t64\t64")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines))
    (base / "words.txt").write_text("n01\tgoldfish, Carassius auratus\nn02\tsalamander\nn03\tbullfrog")


FORMATS = {
    "cifar10": (write_cifar, (3, 32, 32), 10),
    "cifar100": (lambda r: write_cifar(r, hundred=True, k=100, n_train=200, n_test=100), (3, 32, 32), 100),
    "mnist": (write_mnist, (1, 28, 28), 10),
    "fashion_mnist": (lambda r: write_mnist(r, "FashionMNIST"), (1, 28, 28), 10),
    "svhn": (write_svhn, (3, 32, 32), 10),
    "stl10": (write_stl10, (3, 96, 96), 10),
    "tiny_imagenet": (write_tiny_imagenet, (3, 64, 64), 3),
}


@pytest.mark.parametrize("dataset", list(FORMATS))
def test_loader_reads_its_format(tmp_path, dataset):
    write, shape, k = FORMATS[dataset]
    write(tmp_path)
    splits = load_splits(DataConfig(dataset=dataset, root=str(tmp_path), val_per_class=1), seed=0)
    assert splits.input_shape == shape
    assert splits.num_classes == k
    assert splits.train.x.dtype == torch.uint8
    for part in (splits.train, splits.val, splits.test):
        assert 0 <= int(part.y.min()) and int(part.y.max()) < k
    assert splits.val.per_class(k) == [1] * k
    x = splits.train.images(slice(0, 4))
    assert x.dtype == torch.float32 and 0 <= float(x.min()) and float(x.max()) <= 1


def test_cifar_pixels_and_labels_survive_loading(tmp_path):
    images = write_cifar(tmp_path)
    splits = load_splits(DataConfig(dataset="cifar10", root=str(tmp_path), val_per_class=0, val_fraction=0.0),
                         seed=0)
    x, y = images["test_batch"]
    assert torch.equal(splits.test.x, torch.from_numpy(x.reshape(-1, 3, 32, 32)))
    assert splits.test.y.tolist() == y
    assert splits.class_names[:2] == ["c0", "c1"]


def test_svhn_maps_label_10_to_digit_0(tmp_path):
    write_svhn(tmp_path)
    splits = load_splits(DataConfig(dataset="svhn", root=str(tmp_path), val_fraction=0.0), seed=0)
    assert sorted(set(splits.test.y.tolist())) == list(range(10))


def test_tiny_imagenet_names_and_class_folder_layout(tmp_path):
    write_tiny_imagenet(tmp_path)
    splits = load_splits(DataConfig(dataset="tiny_imagenet", root=str(tmp_path), val_fraction=0.0), seed=0)
    assert splits.class_names == ["goldfish", "salamander", "bullfrog"]
    assert splits.test.per_class(3) == [2, 2, 2]


def test_missing_dataset_says_where_and_how(tmp_path):
    with pytest.raises(DataError) as err:
        load_splits(DataConfig(dataset="cifar10", root=str(tmp_path / "nowhere")), seed=0)
    message = str(err.value)
    assert str((tmp_path / "nowhere").resolve()) in message
    assert "data.download" in message and "cifar-10-batches-py" in message


def test_digits_split_is_balanced_deterministic_and_disjoint():
    cfg = DataConfig(dataset="digits", val_per_class=15)
    a, b, c = load_splits(cfg, 1), load_splits(cfg, 1), load_splits(cfg, 2)
    assert a.val.per_class(10) == [15] * 10
    assert torch.equal(a.val.x, b.val.x) and not torch.equal(a.val.x, c.val.x)
    assert torch.equal(a.test.x, c.test.x)  # the test set does not depend on the seed
    assert len(a.train) + len(a.val) + len(a.test) == 1797
    train_rows = {tuple(r.flatten().tolist()) for r in a.train.x}
    assert not any(tuple(r.flatten().tolist()) in train_rows for r in a.val.x[:20])


def test_val_fraction_and_train_subset():
    s = load_splits(DataConfig(dataset="digits", val_per_class=0, val_fraction=0.2, train_per_class=30), 0)
    assert s.train.per_class(10) == [30] * 10
    assert all(abs(n - 0.2 * 126) < 2 for n in s.val.per_class(10))


def test_extra_validation_leaves_the_seeds_training_images_as_they_were():
    base = DataConfig(dataset="digits", val_per_class=5, train_per_class=100)
    more = DataConfig(dataset="digits", val_per_class=5, train_per_class=100, val_extra_per_class=7)
    for seed in (0, 3):
        a, b = load_splits(base, seed), load_splits(more, seed)
        assert torch.equal(a.train.x, b.train.x) and torch.equal(a.train.y, b.train.y)
        assert b.val.per_class(10) == [12] * 10
        rows = lambda d: {tuple(r.flatten().tolist()) for r in d.x}  # noqa: E731
        assert rows(a.val) < rows(b.val) and not rows(b.val) & rows(b.train)
    assert not torch.equal(load_splits(more, 0).val.x, load_splits(more, 3).val.x)


def test_extra_validation_without_a_training_subset_is_refused(tmp_path):
    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError

    path = tmp_path / "p.toml"
    path.write_text('name = "p"\n[data]\ndataset = "digits"\nval_extra_per_class = 5\n[method]\nname = "pgd_at"\n')
    with pytest.raises(ProfileError, match="data.val_extra_per_class.*train_per_class"):
        load_profile(path)


def test_gaussian_classes_differ_in_variance():
    s = load_splits(DataConfig(dataset="gaussian", gaussian_classes=3, gaussian_var_ratio=4.0, gaussian_sigma=0.02), 0)
    assert s.input_shape == (16,)
    stds = [s.train.x[s.train.y == k].std(0).mean().item() for k in range(3)]
    assert stds[0] < stds[1] < stds[2]
    assert stds[2] / stds[0] == pytest.approx(4.0, rel=0.15)
    means = [s.train.x[s.train.y == k].mean().item() for k in range(2)]
    assert means[0] < 0.5 < means[1]  # classes 0 and 1 are the paper's -theta and +theta


def test_random_crop_flip_is_a_shifted_copy():
    x = torch.arange(2 * 1 * 8 * 8, dtype=torch.float32).view(2, 1, 8, 8) / 128
    out = random_crop_flip(x, torch.Generator().manual_seed(0), flip=False)
    assert out.shape == x.shape
    for i in range(2):  # every output is a window of the zero-padded input
        padded = torch.nn.functional.pad(x[i], (1, 1, 1, 1))
        windows = [padded[:, r:r + 8, c:c + 8] for r in range(3) for c in range(3)]
        assert any(torch.equal(out[i], w) for w in windows)


def test_digits_read_without_scikit_learn_are_load_digits():
    """The engine reads scikit-learn's digits CSV itself (no sklearn import at start-up): the same arrays."""
    import numpy as np
    from sklearn.datasets import load_digits

    from engine.data.datasets import digits_arrays

    images, target = digits_arrays()
    bunch = load_digits()
    assert np.array_equal(images, bunch.images) and np.array_equal(target, bunch.target)
    assert images.dtype == bunch.images.dtype and target.dtype == bunch.target.dtype


def test_a_broken_torchvision_is_reported_as_such_not_as_a_failed_download(tmp_path, monkeypatch):
    """A torchvision built for another torch fails at import ("operator torchvision::nms does not exist"): the
    error says torchvision does not load with this torch, and how to fix it, not that a download failed."""
    import builtins

    import pytest

    from engine.data.tensors import DataError
    from engine.data.vision import load_vision

    real = builtins.__import__

    def broken(name, *args, **kwargs):
        if name.startswith("torchvision"):
            raise RuntimeError("operator torchvision::nms does not exist")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    with pytest.raises(DataError) as raised:
        load_vision("cifar10", tmp_path, want_download=True)
    message = str(raised.value)
    assert message.startswith("torchvision does not load with torch ") and "torchvision::nms" in message
    assert "downloading" not in message and "pip install torchvision" in message
