"""The add_constant instantiations the GPU tests use; CI compile-checks each of them with nvcc."""

CONSTANTS = (7, -3, 2**31 - 1, 2, 5, 11, 1)
