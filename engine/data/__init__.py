"""Data sets as in-memory tensors, class-balanced splits and batch augmentation."""

from engine.data.datasets import Splits, load_splits
from engine.data.tensors import DataError, TensorData

__all__ = ["DataError", "Splits", "TensorData", "load_splits"]
