"""cupyx for the NumPy stand-in of CuPy (tests only): pinned memory is plain host memory here."""
import numpy


def empty_pinned(shape, dtype=numpy.float64):
    return numpy.empty(shape, dtype=dtype)
