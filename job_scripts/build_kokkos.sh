#!/usr/bin/env bash
# Builds Kokkos 3.4.01 with one parallel backend and installs it into a cache folder outside the
# repository. Debian's own Kokkos package (libtrilinos-kokkos-dev) is Serial only; this gives
#   openmp   Serial + OpenMP (libgomp): the threaded host Kokkos the CPU build uses (test.sh)
#   serial   Serial only: the kernels on one core, with the patches (fences reported, so the device
#            checks run); the AddressSanitizer build's (job_scripts/test_sanitizers.sh)
#   threads  Serial + Threads (pthreads), compiled with -fsanitize=thread: for the ThreadSanitizer
#            build (job_scripts/test_tsan.sh; libgomp is not TSan-instrumented, and Kokkos 3.4
#            allows only one host parallel backend at a time)
#   cuda     Serial + Cuda for sm_80 and sm_90 (A100, H100/H200) with PTX for newer GPUs, with
#            nvcc_wrapper: the GPT2_ENABLE_CUDA build
#            (job_scripts/build_cuda.sh, through build_kokkos_cuda.sh)
# All are C++17, Release, static libraries.
#
# The source is Kokkos 3.4.01 as shipped inside Debian bookworm's `trilinos` source package. It is
# fetched with apt through a private configuration (nothing under /etc/apt is touched); the mirror
# is the one this machine's apt already uses. The tarball is cached and shared by all backends, so
# it is downloaded once. Patches (cmake/patches/): every backend applies kokkos-3.4.01-fence-hooks.patch
# (fence events for the tools interface, so the trainer counts every whole-device wait) and
# kokkos-3.4.01-launch-waits.patch (launches that wait on the host: reported, and on CUDA avoided
# below 4 KiB); the host backends kokkos-3.4.01-host-huge-pages.patch (buffers of 2 MiB and more
# advised onto transparent huge pages); cuda also
# kokkos-3.4.01-cuda13.patch (CUDA 13, a HOPPER90 arch), kokkos-3.4.01-cuda-team-reduce.patch (a
# barrier a team reduction lacks) and kokkos-3.4.01-cuda-ptx.patch (PTX may run on a newer GPU),
# threads kokkos-3.4.01-threads-tsan.patch
# (synchronization TSan can see).
# An install is reused while its stamp (version, backend, options, patch checksum) matches; one
# build runs at a time per cache folder (a second caller waits, then finds the install ready).
#
# Usage: job_scripts/build_kokkos.sh BACKEND [--print-prefix] [--force]
#   BACKEND         openmp | serial | threads | cuda
#   --print-prefix  print the install folder and exit
#   --force         rebuild even if the install is already there
# Environment:
#   GPT2_CACHE             cache root (default ~/.cache/gpt2-kokkos)
#   KOKKOS_OPENMP_PREFIX   install folder of openmp  (default $GPT2_CACHE/kokkos-3.4.01-openmp)
#   KOKKOS_SERIAL_PREFIX   install folder of serial  (default $GPT2_CACHE/kokkos-3.4.01-serial)
#   KOKKOS_THREADS_PREFIX  install folder of threads (default $GPT2_CACHE/kokkos-3.4.01-threads-tsan)
#   KOKKOS_CUDA_PREFIX     install folder of cuda    (default $GPT2_CACHE/kokkos-3.4.01-cuda-sm80-sm90)
#   CXX                    host compiler of the openmp/threads builds (default c++)
#   CUDA_HOME              CUDA toolkit (default: the nvcc on PATH, else /usr/local/cuda)
#   JOBS                   parallel build jobs (default 2)
#   GPT2_DEBIAN_MIRROR     Debian archive URI, where /etc/apt names none
set -euo pipefail

KOKKOS_VERSION=3.4.01
DEBIAN_SUITE=bookworm
SOURCE_PACKAGE=trilinos

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${GPT2_CACHE:-$HOME/.cache/gpt2-kokkos}
DOWNLOADS=$CACHE/downloads
JOBS=${JOBS:-2}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
BACKEND="" PRINT_PREFIX=0 FORCE=0
for arg in "$@"; do
  case $arg in
    openmp|serial|threads|cuda) BACKEND=$arg ;;
    --print-prefix) PRINT_PREFIX=1 ;;
    --force) FORCE=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build_kokkos: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
[[ -n $BACKEND ]] || { echo "build_kokkos: which backend? openmp | serial | threads | cuda (try --help)" >&2; exit 2; }

log() { echo "[build_kokkos $BACKEND] $*"; }
die() { echo "[build_kokkos $BACKEND] ERROR: $*" >&2; exit 1; }
now() { date +%s; }

# ---- what each backend is -------------------------------------------------------------------------
# Everything that shapes the install goes into KOKKOS_OPTIONS (and the patch), and so into the stamp.
KOKKOS_OPTIONS=(
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_CXX_STANDARD=17
  -DCMAKE_CXX_EXTENSIONS=OFF
  -DBUILD_SHARED_LIBS=OFF
  -DKokkos_ENABLE_SERIAL=ON
  -DKokkos_ENABLE_TESTS=OFF
  -DKokkos_ENABLE_EXAMPLES=OFF
)
PATCHES=("$REPO_ROOT/cmake/patches/kokkos-$KOKKOS_VERSION-fence-hooks.patch"
         "$REPO_ROOT/cmake/patches/kokkos-$KOKKOS_VERSION-launch-waits.patch")
# Where the tensors are host memory, large buffers on transparent huge pages.
[[ $BACKEND == cuda ]] || PATCHES+=("$REPO_ROOT/cmake/patches/kokkos-$KOKKOS_VERSION-host-huge-pages.patch")
case $BACKEND in
  openmp)
    PREFIX=${KOKKOS_OPENMP_PREFIX:-$CACHE/kokkos-$KOKKOS_VERSION-openmp}
    DESCRIPTION="Serial + OpenMP, C++17"
    KOKKOS_OPTIONS+=(-DKokkos_ENABLE_OPENMP=ON)
    DEVICE=OPENMP
    ;;
  serial)
    PREFIX=${KOKKOS_SERIAL_PREFIX:-$CACHE/kokkos-$KOKKOS_VERSION-serial}
    DESCRIPTION="Serial, C++17"
    DEVICE=SERIAL
    ;;
  threads)
    PREFIX=${KOKKOS_THREADS_PREFIX:-$CACHE/kokkos-$KOKKOS_VERSION-threads-tsan}
    DESCRIPTION="Serial + Threads, C++17, ThreadSanitizer"
    # (Kokkos 3.4 calls its Threads backend PTHREAD in its options.)
    KOKKOS_OPTIONS+=(-DKokkos_ENABLE_PTHREAD=ON "-DCMAKE_CXX_FLAGS=-fsanitize=thread -g")
    DEVICE=PTHREAD
    # Its threads synchronize through volatile flags and fences, which TSan cannot see; the patch
    # makes them acquire/release atomics.
    PATCHES+=("$REPO_ROOT/cmake/patches/kokkos-$KOKKOS_VERSION-threads-tsan.patch")
    ;;
  cuda)
    PREFIX=${KOKKOS_CUDA_PREFIX:-$CACHE/kokkos-$KOKKOS_VERSION-cuda-sm80-sm90}
    DESCRIPTION="Serial + Cuda, sm_80 + sm_90 + compute_90 PTX, C++17"
    PATCHES+=("$REPO_ROOT/cmake/patches/kokkos-$KOKKOS_VERSION-cuda13.patch"
              "$REPO_ROOT/cmake/patches/kokkos-$KOKKOS_VERSION-cuda-team-reduce.patch"
              "$REPO_ROOT/cmake/patches/kokkos-$KOKKOS_VERSION-cuda-ptx.patch")
    # Kokkos' own arch is the oldest GPU (AMPERE80: its -arch=sm_80 goes to everything built on this
    # Kokkos); the machine code for Hopper and the PTX for newer GPUs are added beside it (the same
    # flags the project adds: cmake/Gpt2Dependencies.cmake, GPT2_CUDA_GENCODE).
    KOKKOS_OPTIONS+=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ARCH_AMPERE80=ON
                     "-DCMAKE_CXX_FLAGS=-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90")
    DEVICE=CUDA
    ;;
esac
STAMP=$PREFIX/.gpt2-kokkos-stamp
((PRINT_PREFIX)) && { echo "$PREFIX"; exit 0; }

# The stamp records the backend, the options and the patch: changing any of them triggers a rebuild.
want_stamp="kokkos $KOKKOS_VERSION $BACKEND $(printf '%s\n' "${KOKKOS_OPTIONS[@]}" | sha256sum | cut -c1-16)"
for patch_file in "${PATCHES[@]}"; do
  [[ -f $patch_file ]] || die "patch not found: $patch_file"
  want_stamp+=" patch $(sha256sum "$patch_file" | cut -d' ' -f1)"
done
installed() {
  [[ -f $STAMP && $(cat "$STAMP") == "$want_stamp" ]] &&
    compgen -G "$PREFIX/lib*/cmake/Kokkos/KokkosConfig.cmake" >/dev/null
}

# ---- already installed? ---------------------------------------------------------------------------
if ((FORCE == 0)) && installed; then
  log "Kokkos $KOKKOS_VERSION ($DESCRIPTION) already installed in $PREFIX; nothing to do"
  exit 0
fi
# One build at a time per cache (all backends share the downloaded tarball); a second caller waits,
# then finds the install ready.
mkdir -p "$CACHE"
exec 9>"$CACHE/.build_kokkos.lock"
if ! flock -n 9; then
  log "another Kokkos build holds $CACHE/.build_kokkos.lock; waiting for it"
  flock 9 || die "could not lock $CACHE/.build_kokkos.lock"
fi
if ((FORCE == 0)) && installed; then
  log "Kokkos $KOKKOS_VERSION ($DESCRIPTION) was installed in $PREFIX meanwhile; nothing to do"
  exit 0
fi
[[ -f $STAMP ]] && log "install in $PREFIX was made differently ($(cat "$STAMP")); rebuilding"

# ---- tools --------------------------------------------------------------------------------------
if [[ $BACKEND == cuda ]]; then
  if [[ -z ${CUDA_HOME:-} ]]; then
    if command -v nvcc >/dev/null; then
      CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    else
      CUDA_HOME=/usr/local/cuda
    fi
  fi
  [[ -x $CUDA_HOME/bin/nvcc ]] ||
    die "nvcc not found (looked in CUDA_HOME=$CUDA_HOME/bin). Install the CUDA toolkit or set CUDA_HOME."
  export PATH=$CUDA_HOME/bin:$PATH  # nvcc_wrapper calls `nvcc` from PATH
  log "CUDA: $CUDA_HOME ($(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
fi

# Debian packages for the commands this script runs; installed only when one is missing.
missing=()
for pair in apt-get:apt tar:tar gzip:gzip patch:patch cmake:cmake make:make g++:g++ sha256sum:coreutils flock:util-linux; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || die "missing tools; please install: ${missing[*]}"
  log "installing missing packages: ${missing[*]}"
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"
fi

# ---- the source tarball (cached) ----------------------------------------------------------------
# Prints the URI of this machine's Debian mirror, read from its own apt configuration:
# deb822 stanzas (*.sources) first, then one-line `deb` entries (sources.list, *.list).
# A stanza/line for $DEBIAN_SUITE wins; else any main-archive suite (not -security/-updates/...).
debian_mirror() {
  local f
  for pass in exact any; do
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/*.sources; do
      [[ -r $f ]] || continue
      awk -v want="$DEBIAN_SUITE" -v pass="$pass" '
        BEGIN { RS = ""; FS = "\n" }
        {
          deb = 0; ok = 0; uri = ""; on = 1
          for (i = 1; i <= NF; i++) {
            n = split($i, w, /[ \t]+/)
            if (w[1] == "Types:")   for (j = 2; j <= n; j++) if (w[j] == "deb") deb = 1
            if (w[1] == "Enabled:" && w[2] == "no") on = 0
            if (w[1] == "URIs:" && uri == "") uri = w[2]
            if (w[1] == "Suites:")
              for (j = 2; j <= n; j++)
                if (w[j] == want || (pass == "any" && w[j] !~ /-/)) ok = 1
          }
          if (deb && ok && on && uri != "") { print uri; exit }
        }' "$f" | grep . && return 0
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -r $f ]] || continue
      # deb [options] URI suite components...
      sed -E 's/#.*//; s/\[[^]]*\]//' "$f" | awk -v want="$DEBIAN_SUITE" -v pass="$pass" '
        $1 == "deb" && ($3 == want || (pass == "any" && $3 !~ /-/)) { print $2; exit }' | grep . && return 0
    done
  done
  return 1
}

fetch_tarball() {
  local mirror tmp
  mirror=${GPT2_DEBIAN_MIRROR:-$(debian_mirror || true)}
  [[ -n $mirror ]] || die "no Debian mirror found in /etc/apt (sources.list.d/*.sources, sources.list);
  set GPT2_DEBIAN_MIRROR to a Debian archive URI"
  log "downloading the $SOURCE_PACKAGE source package ($DEBIAN_SUITE) from $mirror"
  mkdir -p "$DOWNLOADS"
  tmp=$(mktemp -d "$CACHE/apt-tmp.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/dl"
  local signed=""
  [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
    signed="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
  echo "deb-src $signed$mirror $DEBIAN_SUITE main" >"$tmp/sources.list"
  local apt_opts=(
    -o "Dir::Etc::sourcelist=$tmp/sources.list" -o Dir::Etc::sourceparts=/nonexistent
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache"
    -o APT::Sandbox::User=root -q
  )
  apt-get "${apt_opts[@]}" update ||
    die "apt-get update with the private source list failed (no network or mirror unreachable?)"
  (cd "$tmp/dl" && apt-get "${apt_opts[@]}" source --download-only "$SOURCE_PACKAGE") ||
    die "could not download the $SOURCE_PACKAGE source package from $mirror"
  compgen -G "$tmp/dl/${SOURCE_PACKAGE}_*.orig.tar.*" >/dev/null ||
    die "the downloaded source package has no orig tarball"
  mv "$tmp"/dl/* "$DOWNLOADS"/
  rm -rf "$tmp"
  trap - EXIT
}

# Prints the cached orig tarball, if there is exactly one recognisable.
cached_tarball() { compgen -G "$DOWNLOADS/${SOURCE_PACKAGE}_*.orig.tar.*" | sort -V | tail -n1; }

# Checks a cached tarball against the SHA-256 in its .dsc (which apt verified when downloading).
tarball_ok() {
  local tb=$1 dsc sum
  dsc=$(compgen -G "$DOWNLOADS/${SOURCE_PACKAGE}_*.dsc" | sort -V | tail -n1) || return 1
  sum=$(awk -v f="$(basename "$tb")" '/^Checksums-Sha256:/ {s = 1; next} /^[^ ]/ {s = 0}
                                     s && $3 == f {print $1}' "$dsc")
  [[ -n $sum ]] && echo "$sum  $tb" | sha256sum --quiet -c -
}

t0=$(now)
TARBALL=$(cached_tarball || true)
if [[ -n $TARBALL ]] && tarball_ok "$TARBALL"; then
  log "using cached source tarball $TARBALL"
else
  [[ -n $TARBALL ]] && log "cached tarball $TARBALL fails its checksum; downloading again"
  rm -f "$DOWNLOADS/${SOURCE_PACKAGE}_"*
  fetch_tarball
  TARBALL=$(cached_tarball) || die "download finished but no tarball is in $DOWNLOADS"
  tarball_ok "$TARBALL" || die "downloaded tarball $TARBALL does not match its .dsc checksum"
fi
t_download=$(($(now) - t0))

# ---- extract packages/kokkos (and patch) ----------------------------------------------------------
WORK=$CACHE/work/kokkos-$KOKKOS_VERSION-$BACKEND
SRC=$WORK/src
BUILD=$WORK/build
rm -rf "$WORK"
mkdir -p "$WORK/extract"
t0=$(now)
log "extracting */packages/kokkos/* from $(basename "$TARBALL")"
tar -xf "$TARBALL" -C "$WORK/extract" --wildcards '*/packages/kokkos/*' ||
  die "could not extract packages/kokkos from $TARBALL"
kokkos_dir=$(find "$WORK/extract" -mindepth 3 -maxdepth 3 -type d -path '*/packages/kokkos' | head -n1)
[[ -n $kokkos_dir && -f $kokkos_dir/CMakeLists.txt ]] || die "no packages/kokkos/ in $TARBALL"
mv "$kokkos_dir" "$SRC"
rm -rf "$WORK/extract"
found_version=$(sed -n 's/^set(Kokkos_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)).*/\2/p' "$SRC/CMakeLists.txt" |
  paste -sd.)
[[ $found_version == "$KOKKOS_VERSION" ]] ||
  die "expected Kokkos $KOKKOS_VERSION in $(basename "$TARBALL"), found '$found_version'"
for patch_file in "${PATCHES[@]}"; do
  log "applying $(basename "$patch_file")"
  patch -p1 -s -d "$SRC" <"$patch_file" || die "$(basename "$patch_file") does not apply to the Kokkos source"
done
t_extract=$(($(now) - t0))

# ---- configure, build, install ------------------------------------------------------------------
if [[ $BACKEND == cuda ]]; then
  COMPILER=$SRC/bin/nvcc_wrapper
else
  COMPILER=$(command -v "${CXX:-c++}") || die "no C++ compiler '${CXX:-c++}'"
fi
t0=$(now)
log "configuring Kokkos $KOKKOS_VERSION ($DESCRIPTION) with $COMPILER"
if [[ -e $PREFIX ]]; then
  # Only ever delete what this script made (or an empty folder).
  [[ -f $STAMP || -f $PREFIX/include/KokkosCore_config.h || -z $(ls -A "$PREFIX") ]] ||
    die "$PREFIX exists and is not a Kokkos install; remove it or set KOKKOS_${BACKEND^^}_PREFIX"
  rm -rf "$PREFIX"
fi
cmake -S "$SRC" -B "$BUILD" "${KOKKOS_OPTIONS[@]}" \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" \
  -DCMAKE_CXX_COMPILER="$COMPILER" >"$WORK/configure.log" 2>&1 ||
  { tail -n 40 "$WORK/configure.log" >&2; die "Kokkos configure failed (log: $WORK/configure.log)"; }
log "building Kokkos with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS" >"$WORK/build.log" 2>&1 ||
  { tail -n 40 "$WORK/build.log" >&2; die "Kokkos build failed (log: $WORK/build.log)"; }
cmake --install "$BUILD" >"$WORK/install.log" 2>&1 ||
  { tail -n 40 "$WORK/install.log" >&2; die "Kokkos install failed (log: $WORK/install.log)"; }
if [[ $BACKEND == cuda ]]; then
  # The installed package records the compiler it was built with; point it at the installed wrapper
  # (the build tree is deleted below).
  [[ -x $PREFIX/bin/nvcc_wrapper ]] || die "the install has no bin/nvcc_wrapper"
  sed -i "s|$SRC/bin/nvcc_wrapper|$PREFIX/bin/nvcc_wrapper|g" "$PREFIX"/lib*/cmake/Kokkos/*.cmake
fi
# The backend really is in (an unknown option is only a configure warning).
devices=$(sed -n 's/^SET(Kokkos_DEVICES \(.*\))$/\1/p' "$PREFIX"/lib*/cmake/Kokkos/KokkosConfigCommon.cmake)
[[ ";$devices;" == *";$DEVICE;"* ]] || die "the install's Kokkos_DEVICES are '$devices', without $DEVICE"
echo "$want_stamp" >"$STAMP"
t_build=$(($(now) - t0))
rm -rf "$WORK"; rmdir "$CACHE/work" 2>/dev/null || true

log "installed Kokkos $KOKKOS_VERSION into $PREFIX ($(du -sh "$PREFIX" | cut -f1)): $(
  sed -n 's/^SET(Kokkos_\(DEVICES\|ARCH\) \(.*\))$/\1 \2/p' "$PREFIX"/lib*/cmake/Kokkos/KokkosConfigCommon.cmake | paste -sd' ')"
log "times: source ${t_download}s, extract+patch ${t_extract}s, configure+build+install ${t_build}s"
