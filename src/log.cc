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
  if (settings::flag("JITKERN_QUIET")) return;
  if (level < kInfo && !settings::flag("JITKERN_VERBOSE")) return;
  std::fprintf(stderr, "jitkern: %s\n", message.c_str());
}

}  // namespace jitkern::log
