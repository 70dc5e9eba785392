#include "base/log.h"

#include <atomic>
#include <cstdio>

namespace jitkern::log {
namespace {
std::atomic<Sink> g_sink{nullptr};
std::atomic<bool> g_quiet{false}, g_verbose{false};
}  // namespace

void set_sink(Sink sink) { g_sink.store(sink); }

void configure(bool quiet, bool verbose) {
  g_quiet.store(quiet);
  g_verbose.store(verbose);
}

void emit(Level level, const std::string& message) {
  if (Sink sink = g_sink.load()) return sink(level, message.c_str());
  if (g_quiet.load()) return;
  if (level < kInfo && !g_verbose.load()) return;
  std::fprintf(stderr, "jitkern: %s\n", message.c_str());
}

}  // namespace jitkern::log
