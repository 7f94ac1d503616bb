from . import _2023_12  # noqa: F401
