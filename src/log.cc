#include "log.h"

#include <atomic>
#include <cstdio>

#include "settings.h"

namespace jitkern::log {
namespace {
std::atomic<Sink> g_sink{nullptr};
}

void set_sink(Sink sink) { g_sink.store(sink); }

void emit(Level level, const std::string& message) {
  if (Sink sink = g_sink.load()) return sink(level, message.c_str());
  if (settings::flag_or_false("JITKERN_QUIET")) return;  // an invalid value is the request's ValueError
  if (level < kInfo && !settings::flag_or_false("JITKERN_VERBOSE")) return;
  std::fprintf(stderr, "jitkern: %s\n", message.c_str());
}

}  // namespace jitkern::log
