"""numba kernels: pure functions, arrays in / arrays out, forward and backward of one op side by side.

Private to sparkdl: the validating public API is :mod:`sparkdl.nn`. All kernels are compiled with the
options in :mod:`sparkdl.config`.
"""
