// The engine's messages (compile start and finish, waits, commands). One sink: stderr by default,
// or the callback a host installs (the Python layer forwards to the `jitkern` logger).
#pragma once

#include <string>

namespace jitkern::log {

enum Level { kDebug = 10, kInfo = 20, kWarning = 30 };  // the numbers are Python logging's

using Sink = void (*)(int level, const char* message);
// nullptr restores the default: "jitkern: <message>" on stderr for INFO and up (nothing with
// JITKERN_QUIET=1), DEBUG too with JITKERN_VERBOSE=1.
void set_sink(Sink sink);
// Without a sink, what reaches stderr (JITKERN_QUIET, JITKERN_VERBOSE: the configuration stage sets them).
void configure(bool quiet, bool verbose);
void emit(Level level, const std::string& message);

}  // namespace jitkern::log
