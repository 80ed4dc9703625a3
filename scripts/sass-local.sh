#!/usr/bin/env bash
# SASS on this machine, without the GPU: renders and compiles each stem with this tree's
# templates (examples/compile_one, NVRTC 13.5) and runs cuobjdump on the cubin, from the PyPI
# wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (CUDA 13.5; installed on first use into
# .cuobjdump, ignored). Prints, per function of each module (the forward, a varlen module's
# _schedule, a split module's combines): registers, stack, shared memory, its HGMMA / UTMALDG /
# LDL / STL counts, and the SASS lines of its LDL/STL against its last HGMMA (a spill after the
# last HGMMA is outside the main loop), and the main loop's size and encoded stall cycles
# (scripts/sass_loops.py, which reads any loop's control codes). SASS=1 keeps the whole listing
# in /tmp/<stem>.sass.
#   scripts/sass-local.sh <stem> [stem ...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.cuobjdump
if [ ! -x "$dir/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$dir/nvidia/cu13/bin/nvdisasm" ]; then
  python3 -m pip download --no-deps --quiet "nvidia-cuda-cuobjdump==13.5.*" "nvidia-cuda-nvdisasm==13.5.*" -d "$dir/wheel"
  for w in "$dir"/wheel/*.whl; do python3 -m zipfile -e "$w" "$dir"; done
  chmod +x "$dir"/nvidia/cu13/bin/*
fi
bin=$(cd "$dir/nvidia/cu13/bin" && pwd)
export PATH="$bin:$PATH"
cargo build --release --example compile_one -q
for stem in "$@"; do
  target/release/examples/compile_one "$stem" 2>&1 | grep -E " bytes, |error" || { echo "$stem: compile failed"; continue; }
  sass=/tmp/$stem.sass
  cuobjdump --dump-sass /tmp/k.cubin > "$sass"
  cuobjdump --dump-resource-usage /tmp/k.cubin | grep -A1 "Function" | paste - - |
    sed -E 's/^ *Function ([^:]*):\s*/\1 /; s/TEXTURE.*//'
  awk '/Function :/ { f = $3 }
       /HGMMA/ { h[f]++; last[f] = NR }
       /UTMALDG/ { t[f]++ }
       /[^A-Z]LDL/ { l[f]++; at[f] = at[f] " " NR }
       /[^A-Z]STL/ { s[f]++; at[f] = at[f] " " NR }
       /Function :/ { seen[f] = 1 }
       END { for (f in seen) printf "  %s: HGMMA %d UTMALDG %d LDL %d STL %d, last HGMMA at line %d, LDL/STL at%s\n",
                                  f, h[f], t[f], l[f], s[f], last[f], at[f] ? at[f] : " none" }' "$sass"
  # The first HGMMA loop (the main loop): its size and ptxas's stall counts (scripts/sass_loops.py).
  { python3 scripts/sass_loops.py "$sass" 2>/dev/null || true; } | head -1 | sed 's/^loop 0/  main loop/'
  [ "${SASS:-0}" = 1 ] || rm -f "$sass"
done
