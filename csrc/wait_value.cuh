// Stream signalling (the reference framework's (SGLang's) cuda_wait_value): a stream waits until a 32-bit flag equals a value that
// another stream writes (record) or the host writes (set).
//
// Waiting uses the driver's stream memory operations (cuStreamWaitValue32/cuStreamWriteValue32), which
// occupy no SM; where the device refuses them, a one-thread kernel spins instead. An Event's flag lives in
// pinned host memory, so the host sets it with a plain store and launches nothing; or, for Events
// signalled stream to stream, in GPU memory, where a record reaches a waiting stream about three times
// sooner (no PCIe round trip) and the host's set and reads are small copies. A wait with a timeout
// never hangs: past the timeout the stream goes on, and the Event's next call raises TimeoutError. With
// the driver's operations a host watchdog thread enforces the timeout; the spin kernel (also used for a
// timed wait inside a CUDA graph capture, where no watchdog can know when the graph runs) times itself.
#pragma once

#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>

#include <cstdint>
#ifndef __CUDACC_RTC__  // host-only headers
#include <cuda.h>  // CUresult and the stream memory operation flags; the functions come through the runtime
#include <jitkern/detail/driver_entry.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#endif

namespace jitkern_wait_value {

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until *flag == value; with timeout_ns > 0, gives up after that long and reports it in *timed_out.
__global__ void spin_wait_kernel(const volatile int32_t* flag, int32_t value, uint64_t timeout_ns, volatile int32_t* timed_out) {
#ifdef __CUDACC__
  const uint64_t start = timeout_ns > 0 ? global_time_ns() : 0;
  while (*flag != value) {
    if (timeout_ns > 0 && global_time_ns() - start > timeout_ns) {
      *timed_out = value == 0 ? -1 : value;  // nonzero: the value waited for (-1 stands for 0)
      __threadfence_system();
      return;
    }
    __nanosleep(256);
  }
#endif
}

__global__ void write_value_kernel(volatile int32_t* flag, int32_t value) {
#ifdef __CUDACC__
  __threadfence_system();  // what the stream wrote before is visible before the flag
  *flag = value;
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
// An Event's words, in pinned host memory.
struct EventSlot {
  int32_t flag;         // the flag, unless it is in GPU memory
  int32_t timed_out;    // 0, or the value of a wait that gave up (-1 for 0)
  int32_t timeout_ms;   // of that wait
  int32_t device;       // the device of device_flag
  int32_t* device_flag;  // the flag in GPU memory, or null
};

// A timed wait's progress, written by the stream: arrived (the stream reached the wait), passed (it got
// through). Read by the watchdog.
struct WaitMarks {
  uint32_t arrived, passed;
};

// Pinned host memory in slabs, handed out in fixed-size pieces and never returned to CUDA (a piece may
// still be the target of queued GPU operations when its owner is gone). The slabs are mapped, and under
// unified addressing their host address is also their device address (checked once per slab), so the
// pieces are used on the GPU as they are, without a device_address() query per call.
template <typename T>
class PinnedPool {
 public:
  T* take() {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_free.empty()) {
      T* p = m_free.back();
      m_free.pop_back();
      *p = T{};
      return p;
    }
    if (m_slab == nullptr || m_used == kPerSlab) {
      void* slab = nullptr;
      host::RuntimeDeviceCheck(cudaHostAlloc(&slab, sizeof(T) * kPerSlab, cudaHostAllocPortable | cudaHostAllocMapped));
      void* on_device = nullptr;
      host::RuntimeDeviceCheck(cudaHostGetDevicePointer(&on_device, slab, 0));
      host::RuntimeCheck(on_device == slab, "pinned memory is not at the same address on the GPU (no unified addressing)");
      m_slab = static_cast<T*>(slab), m_used = 0;
    }
    T* p = m_slab + m_used++;
    *p = T{};
    return p;
  }
  void give_back(T* p) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_free.push_back(p);
  }

 private:
  static constexpr int kPerSlab = 4096 / sizeof(T);
  std::mutex m_mutex;
  T* m_slab = nullptr;
  int m_used = 0;
  std::vector<T*> m_free;
};

template <typename T>
T load_volatile(const T& word) {
  return __atomic_load_n(&word, __ATOMIC_ACQUIRE);
}
template <typename T>
void store_volatile(T& word, T value) {
  __atomic_store_n(&word, value, __ATOMIC_RELEASE);
}

constexpr int kMaxDevices = 64;

int current_device() {
  int device = 0;
  host::RuntimeDeviceCheck(cudaGetDevice(&device));
  host::RuntimeCheck(device >= 0 && device < kMaxDevices, "device ", device, " is beyond the ", kMaxDevices, " this module supports");
  return device;
}

// The host's own small copies to and from Events' GPU flags go on a non-blocking stream per device, so that
// they are never ordered behind a stream that waits on the flag. Returns the CUDA status (the watchdog
// thread must not throw); callers on the Python path raise.
cudaError_t copy_flag(int device, void* to, const void* from, cudaMemcpyKind kind, size_t bytes = sizeof(int32_t)) noexcept {
  static cudaStream_t streams[kMaxDevices];
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);  // also keeps one device switch at a time
  const host::DeviceGuard guard(device, std::nothrow);
  cudaError_t status = guard.status();
  if (status != cudaSuccess) return status;
  if (streams[device] == nullptr) status = cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking);
  if (status == cudaSuccess) status = cudaMemcpyAsync(to, from, bytes, kind, streams[device]);
  if (status == cudaSuccess) status = cudaStreamSynchronize(streams[device]);
  return status;
}

// Zeroed 32-bit words of GPU memory for Events' flags, in slabs per device, never given back (like the
// pinned slots, a word may still be the target of queued GPU operations when its Event is gone).
int32_t* take_device_flag(int device) {
  constexpr int kPerSlab = 1024;
  static int32_t* slabs[kMaxDevices];
  static int used[kMaxDevices];
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (slabs[device] == nullptr || used[device] == kPerSlab) {
    void* slab = nullptr;
    host::RuntimeDeviceCheck(cudaMalloc(&slab, sizeof(int32_t) * kPerSlab));
    static const int32_t zeros[kPerSlab] = {};
    host::RuntimeDeviceCheck(copy_flag(device, slab, zeros, cudaMemcpyHostToDevice, sizeof(zeros)));
    slabs[device] = static_cast<int32_t*>(slab), used[device] = 0;
  }
  return slabs[device] + used[device]++;
}

// The flag's GPU address (a GPU word, or the mapped pinned word).
int32_t* flag_of(EventSlot* slot) { return slot->device_flag != nullptr ? slot->device_flag : &slot->flag; }

// The driver's stream memory operations, reached through the runtime (no link against libcuda).
struct StreamMemOps {
  using Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  Fn wait = nullptr;
  Fn write = nullptr;
  std::atomic<bool> refused{false};  // the device answered CUDA_ERROR_NOT_SUPPORTED once

  static StreamMemOps& get() {
    static StreamMemOps ops;
    static std::once_flag once;
    std::call_once(once, [] {
      ops.wait = reinterpret_cast<Fn>(host::detail::driver_entry("cuStreamWaitValue32", 12000));
      ops.write = reinterpret_cast<Fn>(host::detail::driver_entry("cuStreamWriteValue32", 12000));
    });
    return ops;
  }
  bool usable() const { return wait != nullptr && write != nullptr && !refused.load(std::memory_order_relaxed); }

  // False where the device refuses the operation (then the caller falls back to a kernel).
  bool call(Fn fn, cudaStream_t stream, const void* address, uint32_t value, unsigned flags) {
    const CUresult r = fn(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(address), value, flags);
    if (r == CUDA_ERROR_NOT_SUPPORTED) return refused.store(true), false;
    if (r != CUDA_SUCCESS) host::Panic("stream memory operation failed with CUresult ", static_cast<int>(r));
    return true;
  }
};

// The GPU address of a caller's word: pinned host memory (mapped) or GPU memory.
inline const void* device_address(const void* p) {
  cudaPointerAttributes attr{};
  host::RuntimeDeviceCheck(cudaPointerGetAttributes(&attr, p));
  host::RuntimeCheck(attr.type != cudaMemoryTypeUnregistered && attr.devicePointer != nullptr,
                     "the flag is pageable host memory, which the GPU cannot read: pin it");
  return attr.devicePointer;
}

// Writes value into the Event's flag from the host (returns the CUDA status: the watchdog must not throw).
cudaError_t release(EventSlot* slot, int32_t value) noexcept {
  if (slot->device_flag == nullptr) return store_volatile(slot->flag, value), cudaSuccess;
  return copy_flag(slot->device, slot->device_flag, &value, cudaMemcpyHostToDevice);
}

// Enforces the timeouts of waits queued with the driver's operations: once a stream has reached such a
// wait and has not got through it after the timeout, the watchdog records the timeout in the Event and
// writes the awaited value into the flag, which releases the stream.
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* dog = new Watchdog;  // never destroyed: its thread outlives static destruction
    return *dog;
  }
  void watch(EventSlot* slot, WaitMarks* marks, int32_t value, int32_t timeout_ms) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_pending.push_back({slot, marks, value, timeout_ms, {}, false, false});
    }
    m_wake.notify_one();
  }
  PinnedPool<WaitMarks>& marks() { return m_marks; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    EventSlot* slot;
    WaitMarks* marks;
    int32_t value, timeout_ms;
    Clock::time_point arrived_at;
    bool arrived, fired;
  };
  Watchdog() { std::thread([this] { loop(); }).detach(); }

  void loop() {
    std::unique_lock<std::mutex> lock(m_mutex);
    for (;;) {
      m_wake.wait(lock, [this] { return !m_pending.empty(); });
      const auto now = Clock::now();
      for (size_t i = 0; i < m_pending.size();) {
        Pending& p = m_pending[i];
        if (load_volatile(p.marks->passed) != 0) {  // through: the marks are free again
          m_marks.give_back(p.marks);
          p = m_pending.back();
          m_pending.pop_back();
          continue;
        }
        if (!p.arrived && load_volatile(p.marks->arrived) != 0) p.arrived = true, p.arrived_at = now;
        if (p.arrived && !p.fired && now - p.arrived_at >= std::chrono::milliseconds(p.timeout_ms)) {
          p.fired = true;
          store_volatile(p.slot->timeout_ms, p.timeout_ms);
          store_volatile(p.slot->timed_out, p.value == 0 ? -1 : p.value);
          release(p.slot, p.value);
        }
        ++i;
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lock.lock();
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::vector<Pending> m_pending;
  PinnedPool<WaitMarks> m_marks;
};

PinnedPool<EventSlot>& event_slots() {
  static PinnedPool<EventSlot>* pool = new PinnedPool<EventSlot>;
  return *pool;
}

EventSlot* slot_of(int64_t handle) {
  host::RuntimeCheck(handle != 0, "the Event's handle is null");
  return reinterpret_cast<EventSlot*>(static_cast<uintptr_t>(handle));
}

// Raises, once, the timeout the Event's last timed wait ran into.
void raise_if_timed_out(EventSlot* slot) {
  const int32_t value = load_volatile(slot->timed_out);
  if (value == 0) return;
  store_volatile(slot->timed_out, 0);
  host::Raise(host::ErrorKind::kTimeout, "jitkern.Event: a wait for value ", value == -1 ? 0 : value, " timed out after ",
              load_volatile(slot->timeout_ms), " ms and the stream went on without it");
}

// Loads both kernels into the context now. Under lazy loading (CUDA's default) the first launch of a kernel
// loads it, and loading waits for kernels already running: a write_value_kernel launched for the first
// time while a spin_wait_kernel waits for it would wait for that spin (it timed out on an H100). Once
// per device (the current one).
// After the first call per device, one atomic load (no lock).
void load_kernels() {
  static std::atomic<bool> loaded[kMaxDevices];
  static std::mutex mutex;
  const int device = current_device();
  if (loaded[device].load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded[device].load(std::memory_order_relaxed)) return;
  cudaFuncAttributes attributes{};
  host::RuntimeDeviceCheck(cudaFuncGetAttributes(&attributes, host::kernel_handle(spin_wait_kernel)));
  host::RuntimeDeviceCheck(cudaFuncGetAttributes(&attributes, host::kernel_handle(write_value_kernel)));
  loaded[device].store(true, std::memory_order_release);
}

// `word`, `flag`: GPU addresses (device_address(), or a PinnedPool piece).
void enqueue_write(cudaStream_t stream, int32_t* word, int32_t value, bool spin) {
  StreamMemOps& ops = StreamMemOps::get();
  if (!spin && ops.usable() && ops.call(ops.write, stream, word, static_cast<uint32_t>(value), CU_STREAM_WRITE_VALUE_DEFAULT)) return;
  host::LaunchKernel(1, 1, stream)(write_value_kernel, word, value);
}

// Waits on `stream` until *flag == value (flag: a GPU word or a pinned host word). With timeout_ms > 0
// and `slot`, gives up after that long and records it in the slot.
void enqueue_wait(cudaStream_t stream, const int32_t* flag, int32_t value, int32_t timeout_ms, EventSlot* slot, bool spin) {
  StreamMemOps& ops = StreamMemOps::get();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  host::RuntimeDeviceCheck(cudaStreamIsCapturing(stream, &capture));
  const bool timed = timeout_ms > 0;
  if (!spin && ops.usable() && !(timed && capture != cudaStreamCaptureStatusNone)) {
    if (!timed) {
      if (ops.call(ops.wait, stream, flag, static_cast<uint32_t>(value), CU_STREAM_WAIT_VALUE_EQ)) return;
    } else {
      WaitMarks* marks = Watchdog::get().marks().take();
      if (ops.call(ops.write, stream, &marks->arrived, 1, CU_STREAM_WRITE_VALUE_DEFAULT)) {
        ops.call(ops.wait, stream, flag, static_cast<uint32_t>(value), CU_STREAM_WAIT_VALUE_EQ);
        ops.call(ops.write, stream, &marks->passed, 1, CU_STREAM_WRITE_VALUE_DEFAULT);
        Watchdog::get().watch(slot, marks, value, timeout_ms);
        return;
      }
      Watchdog::get().marks().give_back(marks);
    }
  }
  if (timed) store_volatile(slot->timeout_ms, timeout_ms);
  host::LaunchKernel(1, 1, stream)(spin_wait_kernel, flag, value, static_cast<uint64_t>(timed ? timeout_ms : 0) * 1000000u,
                                   timed ? &slot->timed_out : nullptr);
}

cudaStream_t as_stream(int64_t stream) { return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream)); }

// ---- exported ----

// The reference framework's op: the current stream waits until flag[0] == value (flag: int32, on the GPU or pinned).
void stream_wait_value(jitkern::TensorView flag, int64_t value) {
  using namespace host;
  SymbolicSize length{"length"};
  SymbolicDevice device;
  TensorMatcher({length}).with_dtype<int32_t>().with_device<kDLCUDA, kDLCUDAHost, kDLCPU>(device).verify(flag, "flag");
  RuntimeCheck(length.unwrap() >= 1, "flag must not be empty");
  RuntimeCheck(value >= INT32_MIN && value <= INT32_MAX, "value must fit in int32, got ", value);
  const DLDevice d = device.unwrap();
  int id = d.device_id;
  if (d.device_type != kDLCUDA) RuntimeDeviceCheck(cudaGetDevice(&id));
  const cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, id));
  load_kernels();
  enqueue_wait(stream, static_cast<const int32_t*>(device_address(flag.data_ptr())), static_cast<int32_t>(value), 0, nullptr, false);
}

// device_flag: the flag in the current device's memory (fast stream to stream), else in pinned host memory.
int64_t event_create(bool device_flag) {
  load_kernels();
  EventSlot* slot = event_slots().take();
  if (device_flag) slot->device = current_device(), slot->device_flag = take_device_flag(slot->device);
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(slot));
}

// record: `stream` writes value into the Event's flag once its earlier work is done.
void event_record(int64_t handle, int64_t value, int64_t stream, bool spin) {
  EventSlot* slot = slot_of(handle);
  raise_if_timed_out(slot);
  host::RuntimeCheck(value >= INT32_MIN && value <= INT32_MAX, "value must fit in int32, got ", value);
  enqueue_write(as_stream(stream), flag_of(slot), static_cast<int32_t>(value), spin);
}

// wait: `stream`'s later work waits until the flag equals value (timeout_ms <= 0: no timeout).
void event_wait(int64_t handle, int64_t value, int64_t timeout_ms, int64_t stream, bool spin) {
  EventSlot* slot = slot_of(handle);
  raise_if_timed_out(slot);
  host::RuntimeCheck(value >= INT32_MIN && value <= INT32_MAX, "value must fit in int32, got ", value);
  host::RuntimeCheck(timeout_ms <= INT32_MAX, "timeout_ms is too large: ", timeout_ms);
  enqueue_wait(as_stream(stream), flag_of(slot), static_cast<int32_t>(value), static_cast<int32_t>(timeout_ms > 0 ? timeout_ms : 0),
               slot, spin);
}

// set: the host writes value into the flag now (a pinned flag: a store; a GPU flag: a 4-byte copy).
void event_set(int64_t handle, int64_t value) {
  EventSlot* slot = slot_of(handle);
  raise_if_timed_out(slot);
  host::RuntimeCheck(value >= INT32_MIN && value <= INT32_MAX, "value must fit in int32, got ", value);
  host::RuntimeDeviceCheck(release(slot, static_cast<int32_t>(value)));
}

// The flag's value as the host sees it now.
int64_t event_value(int64_t handle) {
  EventSlot* slot = slot_of(handle);
  if (slot->device_flag == nullptr) return load_volatile(slot->flag);
  int32_t value = 0;
  host::RuntimeDeviceCheck(copy_flag(slot->device, &value, slot->device_flag, cudaMemcpyDeviceToHost));
  return value;
}

// Whether waits on this device use the driver's operations (true) or the spin kernel.
bool stream_mem_ops_available() {
  StreamMemOps& ops = StreamMemOps::get();
  return ops.usable();
}
#endif  // __CUDACC_RTC__

}  // namespace jitkern_wait_value
