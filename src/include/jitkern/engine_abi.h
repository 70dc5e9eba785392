/* The engine's C ABI (lib/libjitkern_engine.so): what python/jitkern/_engine.py binds with ctypes.
 * tests/python/engine/test_engine_abi.py checks the binding (functions, argument and result types, modes and
 * status codes) against this header. Strings the engine returns are malloc'ed: free them with
 * jitkern_free. A request is a sequence of fields "<key> <byte length>:<value>\n" (src/engine/api/c_api.cc). */
#ifndef JITKERN_ENGINE_ABI_H_
#define JITKERN_ENGINE_ABI_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* jitkern_build's modes; JITKERN_MODE_PARALLEL is added to one: a build among many run at once. */
enum {
  JITKERN_MODE_BUILD = 0,           /* result: the library's path */
  JITKERN_MODE_LOAD = 1,            /* result: "<path>\n<registration prefix>\n<export>\n..." */
  JITKERN_MODE_BUILD_REPORTING = 2, /* result: "<path>\n<compiled|cached>" */
  JITKERN_MODE_PARALLEL = 4,
};

/* What the functions returning int return; on an error *out_error holds the message. */
enum {
  JITKERN_OK = 0,
  JITKERN_BUILD_ERROR = 1,   /* a compile failed (Python: BuildError) */
  JITKERN_VALUE_ERROR = 2,   /* a request, setting or argument is invalid (ValueError) */
  JITKERN_RUNTIME_ERROR = 3, /* anything else (RuntimeError) */
  JITKERN_CACHE_MISS = 4,    /* not cached and JITKERN_ON_MISS=error (CacheMissError) */
};

typedef void (*jitkern_log_sink)(int level, const char* message);

int jitkern_build(const char* request, size_t length, int mode, char** out_result, char** out_error);
int jitkern_cache(const char* request, size_t length, char** out_result, char** out_error);
int jitkern_check_request(const char* request, size_t length, char** out_error);
int jitkern_check_arch(const char* arch, const char* origin, char** out_error);
int jitkern_setting_flag(const char* name);
int jitkern_usable_cpus(void);
int jitkern_find_compiler(int cuda, char** out_result, char** out_error);
char* jitkern_arch_for_capability(int major, int minor);
char* jitkern_config(void);
char* jitkern_settings_markdown(void);
void jitkern_free(char* p);
void jitkern_set_log_sink(jitkern_log_sink sink);
const char* jitkern_version(void);
/* The installed prebuilt wheels' layers, one "label\tdir" line each, searched after JITKERN_PREBUILT_DIRS. */
void jitkern_set_package_layers(const char* text);
/* JITKERN_OK when the loaded libtvm_ffi speaks the C ABI (major.minor) the engine was built against, or
   none is loaded; else JITKERN_VALUE_ERROR with both versions in *out_error. */
int jitkern_check_tvm_ffi(char** out_error);

#ifdef __cplusplus
}
#endif

#endif /* JITKERN_ENGINE_ABI_H_ */
