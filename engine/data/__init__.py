"""Data sets as in-memory tensors, class-balanced splits and batch augmentation."""

from engine.data.datasets import DataError, Splits, TensorData, load_splits

__all__ = ["DataError", "Splits", "TensorData", "load_splits"]
