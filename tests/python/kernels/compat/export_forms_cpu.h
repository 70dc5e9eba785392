// CPU functions exported through every expression form a wrapper may take (see test_compat.py).
#pragma once

#include <cstdint>

template <int64_t kStep>
struct Stepper {
  static int64_t run_one(int64_t x) { return x + kStep; }
};

inline int64_t negate(int64_t x) { return -x; }

template <int64_t kFactor>
int64_t times(int64_t x) {
  return x * kFactor;
}
