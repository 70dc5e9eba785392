#pragma once
#include <time.h>
#include <cstdio>
#include <cstdlib>
namespace jitkern::stagetime {
struct Mark { const char* name; long long ns; };
inline Mark g_marks[64]; inline int g_n = 0;
inline long long now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
inline void mark(const char* n) { if (g_n < 64) g_marks[g_n++] = {n, now()}; }
inline void dump() {
  if (!std::getenv("JK_STAGES")) return;
  for (int i = 1; i < g_n; ++i) std::fprintf(stderr, "STAGE %s %.1f\n", g_marks[i].name, (g_marks[i].ns - g_marks[i-1].ns) / 1000.0);
  g_n = 0;
}
}
