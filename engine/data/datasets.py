"""Load a data set into memory and split it into train / val / test.

Every data set becomes a :class:`TensorData` (images in [0, 1] as uint8 or
float, labels as int64). The test split is the data set's own (or, for data
sets without one, a fixed stratified hold-out independent of the run seed, so
runs with different seeds are scored on the same images). The validation split
is class-balanced and drawn from the training data with the run's seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.contract.config import DataConfig
from engine.data.tensors import TensorData

# Per-channel mean / std used by the model's first layer.
NORMALISATION = {
    "digits": ((0.305,), (0.380,)),
    "gaussian": ((0.5,), (0.1,)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "stl10": ((0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)),
    "tiny_imagenet": ((0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)),
}
DEFAULT_AUGMENT = {"cifar10": "crop_flip", "cifar100": "crop_flip", "stl10": "crop_flip",
                   "tiny_imagenet": "crop_flip", "svhn": "crop"}


@dataclass
class Splits:
    train: TensorData
    val: TensorData
    test: TensorData
    class_names: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: str

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    def sizes(self) -> dict[str, list[int]]:
        k = self.num_classes
        return {"train": self.train.per_class(k), "val": self.val.per_class(k), "test": self.test.per_class(k)}

    def fingerprint(self) -> dict[str, str]:
        """What data the run used, as sha256 of each split's images and labels after the subset is picked and
        before augmentation (the first 16 hex digits): two runs of one profile and seed whose numbers differ
        can then say whether their data did (another decoder of the same files gives other pixels)."""
        import hashlib

        out = {}
        for name in ("train", "val", "test"):
            split = getattr(self, name)
            h = hashlib.sha256()
            for t in (split.x, split.y):
                t = t.detach().cpu().contiguous()
                h.update(f"{t.dtype}{tuple(t.shape)}".encode())
                h.update(t.numpy().tobytes())
            out[name] = h.hexdigest()[:16]
        return out


def stratified_pick(y: np.ndarray, per_class: int | None, fraction: float, rng: np.random.Generator,
                    num_classes: int) -> np.ndarray:
    """Indices of ``per_class`` items of every class (or ``fraction`` of each class)."""
    picked = []
    for k in range(num_classes):
        idx = np.flatnonzero(y == k)
        idx = idx[rng.permutation(len(idx))]
        n = per_class if per_class else int(round(fraction * len(idx)))
        picked.append(idx[: min(n, len(idx))])
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: images [1797, 8, 8] in 0..16 and labels [1797].

    Read from the CSV that scikit-learn ships, as ``load_digits`` reads it, without importing
    scikit-learn (1.5 s of every engine start); ``load_digits`` itself if the file has moved."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt") as fh:
                data = np.loadtxt(fh, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images, bunch.target


def _digits() -> tuple[TensorData, TensorData, list[str]]:
    images, target = digits_arrays()
    x = torch.tensor(images / 16.0, dtype=torch.float32).unsqueeze(1)  # [1797, 1, 8, 8]
    y = torch.tensor(target, dtype=torch.long)
    # A fixed 30% stratified hold-out (seed 0): the same test images for every run.
    test_idx = stratified_pick(target, None, 0.3, np.random.default_rng(0), 10)
    train_mask = np.ones(len(y), dtype=bool)
    train_mask[test_idx] = False
    data = TensorData(x, y)
    return data.subset(np.flatnonzero(train_mask)), data.subset(test_idx), [str(i) for i in range(10)]


def gaussian_data(cfg: DataConfig) -> tuple[TensorData, TensorData, list[str]]:
    """FRL's Eq. 2 generalised to K classes: class k ~ N(0.5 + eta * s_k, sigma_k^2 I).

    s_k is a sign vector (-1 for class 0 and +1 for class 1, as in the paper's
    two-class example; random signs for the rest) and sigma_k grows
    geometrically from sigma to var_ratio * sigma, so later classes are harder.
    Values are clipped to [0, 1]. The distribution and the samples are fixed
    (seeds 0, 1, 2), independent of the run seed.
    """
    k, d = cfg.gaussian_classes, cfg.gaussian_dim
    rng = np.random.default_rng(0)
    signs = rng.choice([-1.0, 1.0], size=(k, d))
    signs[0], signs[1] = -1.0, 1.0
    means = 0.5 + cfg.gaussian_eta * signs
    sigmas = cfg.gaussian_sigma * cfg.gaussian_var_ratio ** (np.arange(k) / max(k - 1, 1))

    def sample(n: int, seed: int) -> TensorData:
        r = np.random.default_rng(seed)
        y = np.repeat(np.arange(k), n)
        x = means[y] + sigmas[y, None] * r.standard_normal((len(y), d))
        return TensorData(torch.tensor(np.clip(x, 0, 1), dtype=torch.float32), torch.tensor(y))

    names = [f"class{i} (sigma={s:.3g})" for i, s in enumerate(sigmas)]
    return sample(cfg.gaussian_train_per_class, 1), sample(cfg.gaussian_test_per_class, 2), names


def load_raw(cfg: DataConfig) -> tuple[TensorData, TensorData, list[str]]:
    if cfg.dataset == "digits":
        return _digits()
    if cfg.dataset == "gaussian":
        return gaussian_data(cfg)
    from engine.data.vision import load_vision

    return load_vision(cfg.dataset, Path(cfg.root).expanduser(), cfg.download)


def load_splits(cfg: DataConfig, seed: int) -> Splits:
    train, test, names = load_raw(cfg)
    k = len(names)
    rng = np.random.default_rng(seed)
    y = train.y.numpy()
    val_idx = stratified_pick(y, cfg.val_per_class or None, cfg.val_fraction, rng, k)
    mask = np.ones(len(y), dtype=bool)
    mask[val_idx] = False
    train_idx = np.flatnonzero(mask)
    if cfg.train_per_class:
        keep = stratified_pick(y[train_idx], cfg.train_per_class, 1.0, rng, k)
        train_idx = train_idx[keep]
    if cfg.val_extra_per_class:  # after the training pick, so the seed's training images are those without it
        mask[train_idx] = False
        rest = np.flatnonzero(mask)
        val_idx = np.sort(np.concatenate([val_idx, rest[stratified_pick(y[rest], cfg.val_extra_per_class, 1.0,
                                                                        rng, k)]]))
    if cfg.test_per_class:
        test = test.subset(stratified_pick(test.y.numpy(), cfg.test_per_class, 1.0,
                                           np.random.default_rng(0), k))
    mean, std = NORMALISATION[cfg.dataset]
    augment = DEFAULT_AUGMENT.get(cfg.dataset, "none") if cfg.augment == "auto" else cfg.augment
    return Splits(train.subset(train_idx), train.subset(val_idx), test, names, mean, std, augment)
