// device::atomic::max for float, correct for negative values.
//
// NaN policy: NaN is sticky. Storing max(x, NaN) leaves a canonical positive quiet NaN in memory
// and later calls keep it, so a NaN anywhere in an amax reduction shows up in the result instead of
// being silently dropped.
#pragma once

#include <jitkern/utils.cuh>

namespace device::atomic {

JITKERN_DEVICE float max(float* address, float value) {
  if (value != value) value = __int_as_float(0x7fc00000);  // canonical NaN: largest as a signed int
  // Non-negative floats order like their bit patterns as signed ints; negative floats order
  // inversely to their bit patterns as unsigned ints. The canonical NaN wins in both orders.
  if (!signbit(value)) return __int_as_float(atomicMax(reinterpret_cast<int*>(address), __float_as_int(value)));
  return __uint_as_float(atomicMin(reinterpret_cast<unsigned*>(address), __float_as_uint(value)));
}

}  // namespace device::atomic
