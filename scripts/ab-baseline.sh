#!/usr/bin/env bash
# Build an A/B baseline on the build machine: another revision's bench_fwd and the kernels its
# selection picks for the given shapes, staged as one variant folder for scripts/ab.sh, and that
# revision's drop-in library (libfa4gen.so, jit on) for the Python benchmarks: run them with
# FA4GEN_LIB=.stage/ab/<name>/libfa4gen.so FA4GEN_JIT=1 and an empty FA4GEN_KERNELS folder, so
# both variants compile their kernels with the GPU host's NVRTC.
#   scripts/ab-baseline.sh <rev> <name> "<shapes>"   e.g.  scripts/ab-baseline.sh HEAD old "128,4096,0 256,16384,1"
# then, on the GPU host:  VARIANTS="old:ROOT=.stage/ab/old,BIN=.stage/ab/old/bench_fwd new:ROOT=..." scripts/ab.sh
# Why a binary of its own: a bench_fwd refuses kernels rendered from other templates than its
# own (the manifest records the templates' hash), so a baseline built from the working tree's
# binary loads nothing. Run it after `cargo xtask stage` (which empties .stage).
set -euo pipefail
rev=${1:?revision} name=${2:?variant name} shapes=${3:?shapes}
root=$(git rev-parse --show-toplevel)
wt=$(mktemp -d /tmp/fa4gen-ab-XXXXXX)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"' EXIT
git -C "$root" worktree add -f "$wt" "$rev" --detach >/dev/null
# NVRTC from the ignored folders the project installs it into (no download if present).
for d in .nvrtc .nvrtc130; do [ -d "$root/$d" ] && cp -r "$root/$d" "$wt/"; done
export CARGO_TARGET_DIR="$root/target/ab-$name"
(cd "$wt" && cargo build --release --lib --example bench_fwd --features jit)
# shellcheck disable=SC2086 # the shapes are separate arguments
"$CARGO_TARGET_DIR/release/examples/bench_fwd" --stems $shapes | sort -u > "$wt/ab-stems.txt"
(cd "$wt" && cargo xtask gen --arch sm90 --plan ab-stems.txt)
out="$root/.stage/ab/$name"
rm -rf "$out" && mkdir -p "$out"
cp -r "$wt/generated/plans/ab-stems/sm90" "$out/"
cp "$CARGO_TARGET_DIR/release/examples/bench_fwd" "$out/bench_fwd"
cp "$CARGO_TARGET_DIR/release/libfa4gen.so" "$out/libfa4gen.so"
strip "$out/bench_fwd" "$out/libfa4gen.so" 2>/dev/null || true
echo "baseline $rev ($(git -C "$wt" rev-parse --short HEAD)) in $out: $(grep -c . "$wt/ab-stems.txt") kernels, bench_fwd, libfa4gen.so"
