#!/usr/bin/env bash
# Sets everything up, then runs the demo (add_constant on the GPU, or the CPU path without one).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/scripts/setup.sh"
echo "running the demo (python -m jitkern.demo) ..."
cd /tmp && python -m jitkern.demo
