"""Level 2 training support: datasets, samplers and batch transforms."""

from __future__ import annotations

from d5core.training.datasets import ArrayDataset, load_dataset
from d5core.training.samplers import (
    BucketSampler,
    ChoiceSampler,
    PartitionedSampler,
    SequentialSampler,
    ShuffleSampler,
    make_sampler,
)
from d5core.training.transforms import (
    Compose,
    Cutout,
    Normalize,
    RandomCrop,
    RandomFlip,
    Transform,
    make_transforms,
)

__all__ = [
    "ArrayDataset",
    "BucketSampler",
    "ChoiceSampler",
    "Compose",
    "Cutout",
    "Normalize",
    "PartitionedSampler",
    "RandomCrop",
    "RandomFlip",
    "SequentialSampler",
    "ShuffleSampler",
    "Transform",
    "load_dataset",
    "make_sampler",
    "make_transforms",
]
