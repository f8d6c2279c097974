#!/usr/bin/env bash
# Builds targets of a configured tree, falling back from a failed unity build to a file-by-file one:
#   scripts/cmake_build.sh DIR [TARGET...]      (default: all; JOBS parallel jobs, default nproc)
# A unity build (DT_UNITY_BUILD=ON, CMakeLists.txt) compiles each library's .cc files in batches, where two
# files' same-named helpers in anonymous namespaces collide, depending on how files fall into batches. Such a
# failure is not a bug of the code, so the tree is reconfigured with DT_UNITY_BUILD=OFF (remembered in
# DIR/unity-off, which scripts/build.sh and scripts/sanitizers/config.sh honour) and built again; the warning
# names the fix: leave the file out of the batches (SKIP_UNITY_BUILD_INCLUSION in its CMakeLists.txt).
set -euo pipefail
dir=$1
shift
targets=()
if (($#)); then targets=(--target "$@"); fi
cmake --build "$dir" -j "${JOBS:-$(nproc)}" "${targets[@]}" && exit 0
grep -q '^DT_UNITY_BUILD:BOOL=ON$' "$dir/CMakeCache.txt" || exit 1
echo "cmake_build.sh: WARNING: the unity build of $dir failed (above); building it again file by file." >&2
echo "cmake_build.sh: if the error is a redefinition between two files of one library, leave one out of the" \
  "batches (set_source_files_properties(... SKIP_UNITY_BUILD_INCLUSION ON) in its CMakeLists.txt)." >&2
touch "$dir/unity-off"
cmake "$dir" -DDT_UNITY_BUILD=OFF >/dev/null
cmake --build "$dir" -j "${JOBS:-$(nproc)}" "${targets[@]}"
