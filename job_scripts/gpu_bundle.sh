#!/usr/bin/env bash
# Packs everything a GPU machine needs to run the GPU checks and the benchmark into one folder,
# gpu-bundle/ (git-ignored), to copy there next to the working tree; run it there with
# job_scripts/gpu_run.sh. That machine has the NVIDIA driver, CUDA 13 (cuBLAS, NCCL
# through PyTorch's CUDA wheels) and python3 with torch and numpy, but no MPI, no HDF5 and no network.
#
# Steps (here, on the build machine):
#   1. builds: the host build (build/: gpt2, kernel_check) for the references, and the CUDA build
#      (job_scripts/build_cuda.sh into build-cuda/: gpt2, unit_tests, mpi_tests, kernel_check,
#      bench_train_step, gemm_sweep; GPT2_BUNDLE_BINS a subset -- gpu_run.sh skips what needs the rest);
#   2. references from the host build: kernel_check --write (every kernel's outputs) and the tiny
#      training run's data + CPU losses (tests/gpu/check_tiny_run.py --write), with AdamW and with
#      Muon whose Newton-Schulz products read bf16;
#   3. the CUDA binaries into libexec/, with small wrappers in bin/ that set the library path
#      (bin/env.sh: the bundle's lib/, then the device's cuBLAS/NCCL found at run time);
#   4. the shared libraries they need that the device lacks, copied from this machine as `ldd`
#      resolves them (Debian bookworm: MPICH + UCX + hwloc, parallel HDF5 + libcurl + libsz/libaec,
#      toml++, ...), UCX's transport modules, and MPICH's launcher (mpiexec.hydra + hydra_pmi_proxy).
#      Not copied: glibc, libstdc++/libgcc_s (the device's are newer), the driver's libcuda, and
#      cuBLAS/cuBLASLt/NCCL (about 800 MB; the device has them: bin/env.sh finds them);
#   5. checks: every ELF file of the bundle resolves, in a clean environment with only the bundle's
#      lib/ on LD_LIBRARY_PATH, to the bundle or to glibc/libstdc++/libgcc_s, except the CUDA libraries
#      the device provides; then a 2-rank run of the host build's gpt2 through the bundled mpiexec
#      (and MPI, UCX, HDF5 trace) with LD_DEBUG listing every library loaded, none from the system
#      beyond that set;
#   6. packing: the folder above is ~90 MB (libmpich alone is 41 MB of code), over the 64 MiB that a
#      device call carries, so BUNDLE_DIR holds it as bundle.tar.xz (~22 MB; gpu_run.sh unpacks it
#      into /tmp on the device) beside its MANIFEST.txt; GPT2_BUNDLE_PACK=0 leaves it unpacked
#      (for a GPU machine that shares this file system). The size is checked against the limit.
#
# Usage: job_scripts/gpu_bundle.sh [BUNDLE_DIR]          (default: gpu-bundle in the repository root)
# Environment: JOBS (2), SKIP_BUILD=1 (use the builds as they are), GPT2_BUNDLE_BINS (the CUDA binaries
#   to build and pack, default all six), CPU_BUILD_DIR (build),
#   CUDA_BUILD_DIR (build-cuda), GPT2_BUNDLE_PACK (1), GPT2_BUNDLE_LIMIT_MIB (64: a size cap for
#   the bundle and the working tree together, for transfers that have one), GPT2_BUNDLE_HOST_TEST=1 (a bundle of the HOST build, only for trying
#   gpu_run.sh's machinery on a machine without a GPU, with a stand-in nvidia-smi on PATH)
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${1:-$REPO_ROOT/gpu-bundle}
PACK=${GPT2_BUNDLE_PACK:-1}
CPU_BUILD=${CPU_BUILD_DIR:-$REPO_ROOT/build}
CUDA_BUILD=${CUDA_BUILD_DIR:-$REPO_ROOT/build-cuda}
JOBS=${JOBS:-2}
LIMIT_MIB=${GPT2_BUNDLE_LIMIT_MIB:-64}
PY=/usr/bin/python3

log() { echo "[gpu_bundle] $*"; }
die() { echo "[gpu_bundle] ERROR: $*" >&2; exit 1; }

case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
[[ $DEST = /* ]] || DEST=$PWD/$DEST
[[ $(uname -m) == x86_64 ]] || die "the GPU machine is x86-64; build on x86-64 (this is $(uname -m))"

# Libraries the device provides (or must provide): never copied, allowed to stay unresolved here.
DEVICE_CUDA_RE='^(libcuda\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libnvidia-)'
# The C/C++ runtime of the device: glibc, libstdc++, libgcc_s.
SYSTEM_RE='^(ld-linux-x86-64\.so|linux-vdso\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libnsl\.so|libmvec\.so|libstdc\+\+\.so|libgcc_s\.so)'

# ---- 1. builds ----------------------------------------------------------------------------------
CUDA_BINS=(gpt2 unit_tests mpi_tests kernel_check bench_train_step gemm_sweep)
if [[ -n ${GPT2_BUNDLE_BINS:-} ]]; then
  read -r -a CUDA_BINS <<<"$GPT2_BUNDLE_BINS"
  for b in gpt2 kernel_check bench_train_step; do
    [[ " ${CUDA_BINS[*]} " == *" $b "* ]] || die "GPT2_BUNDLE_BINS must name $b (the checks and the benchmark need it)"
  done
fi
# GPT2_BUNDLE_HOST_TEST=1: a bundle of the HOST build's binaries, only to try gpu_run.sh's machinery
# on a machine without a GPU (with a stand-in nvidia-smi); never for a device.
HOST_TEST=${GPT2_BUNDLE_HOST_TEST:-0}
if [[ $HOST_TEST == 1 ]]; then
  log "TEST BUNDLE of the host build's binaries (GPT2_BUNDLE_HOST_TEST=1): for trying gpu_run.sh without a GPU"
  CUDA_BUILD=$CPU_BUILD
  SKIP_BUILD=1
  CUDA_BINS=("${CUDA_BINS[@]/gemm_sweep}")  # cuBLASLt's: only in a CUDA build
  read -r -a CUDA_BINS <<<"${CUDA_BINS[*]}"
fi
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  log "host build ($CPU_BUILD): gpt2, kernel_check"
  if [[ ! -f $CPU_BUILD/CMakeCache.txt ]]; then
    cmake -S "$REPO_ROOT" -B "$CPU_BUILD" -DGPT2_NATIVE=OFF >"$CPU_BUILD.configure.log" 2>&1 ||  # runs on another CPU
      { tail -n 30 "$CPU_BUILD.configure.log" >&2; die "host configure failed"; }
  fi
  cmake --build "$CPU_BUILD" -j "$JOBS" --target gpt2 kernel_check
  log "CUDA build ($CUDA_BUILD)"
  JOBS=$JOBS GPT2_TARGETS="${CUDA_BINS[*]}" "$REPO_ROOT/job_scripts/build_cuda.sh" "$CUDA_BUILD"
fi
[[ $HOST_TEST == 1 ]] || grep -q '^GPT2_ENABLE_CUDA:BOOL=ON' "$CUDA_BUILD/CMakeCache.txt" 2>/dev/null ||
  die "$CUDA_BUILD is not a CUDA build (job_scripts/build_cuda.sh makes one)"
grep -q '^GPT2_ENABLE_CUDA:BOOL=OFF' "$CPU_BUILD/CMakeCache.txt" 2>/dev/null ||
  die "$CPU_BUILD is not a host build"
for b in "${CUDA_BINS[@]}"; do [[ -x $CUDA_BUILD/bin/$b ]] || die "$CUDA_BUILD/bin/$b was not built"; done
for b in gpt2 kernel_check; do [[ -x $CPU_BUILD/bin/$b ]] || die "$CPU_BUILD/bin/$b was not built"; done

# ---- the bundle is assembled and checked in a staging folder, then packed into DEST ------------------
if [[ -e $DEST ]]; then
  [[ -f $DEST/.gpt2-gpu-bundle || -z $(ls -A "$DEST") ]] ||
    die "$DEST exists and is not a bundle made by this script; remove it or name another folder"
fi
STAGE=$(mktemp -d /tmp/gpt2-gpu-bundle.XXXXXX)
probe=$(mktemp -d /tmp/gpt2-bundle-probe.XXXXXX)
trap 'rm -rf "$STAGE" "$probe"' EXIT
BUNDLE=$STAGE
mkdir -p "$BUNDLE"/{bin,libexec,lib/ucx,reference}

# ---- 2. references (host build) ---------------------------------------------------------------
log "references from the host build"
"$CPU_BUILD/bin/kernel_check" --write "$BUNDLE/reference/kernel_check.bin"
"$CPU_BUILD/bin/kernel_check" --compare "$BUNDLE/reference/kernel_check.bin" >"$BUNDLE/reference/kernel_check_host.txt" ||
  die "the host build does not match its own reference (see $BUNDLE/reference/kernel_check_host.txt)"
PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1 \
  "$PY" "$REPO_ROOT/tests/gpu/check_tiny_run.py" --write "$BUNDLE/reference/tiny" --gpt2 "$CPU_BUILD/bin/gpt2"
PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1 \
  "$PY" "$REPO_ROOT/tests/gpu/check_tiny_run.py" --write "$BUNDLE/reference/tiny_muon_bf16" \
  --gpt2 "$CPU_BUILD/bin/gpt2" --set train.optimizer=muon --set train.ns_dtype=bf16

# ---- 3. binaries ------------------------------------------------------------------------------
for b in "${CUDA_BINS[@]}"; do cp "$CUDA_BUILD/bin/$b" "$BUNDLE/libexec/"; done
HYDRA=$(readlink -f "$(command -v mpiexec.hydra || echo /usr/bin/mpiexec.hydra)")
PROXY=$(readlink -f "$(command -v hydra_pmi_proxy || echo /usr/bin/hydra_pmi_proxy)")
[[ -x $HYDRA && -x $PROXY ]] || die "mpiexec.hydra / hydra_pmi_proxy not found (Debian package mpich)"
cp "$HYDRA" "$BUNDLE/libexec/mpiexec.hydra"
cp "$PROXY" "$BUNDLE/libexec/hydra_pmi_proxy"

# ---- 4. shared libraries ------------------------------------------------------------------------
# copy_deps FILE...: copies every library `ldd` resolves for FILE that is neither the C/C++ runtime
# nor a device CUDA library into lib/ under its soname (a plain file: links do not travel).
copy_deps() {
  local f name path
  for f in "$@"; do
    while read -r name path; do
      [[ $name =~ $SYSTEM_RE || $name =~ $DEVICE_CUDA_RE ]] && continue
      [[ $path == not || -z $path ]] && die "$f: $name is not found on this machine"
      [[ -e $BUNDLE/lib/$name ]] || cp -L "$path" "$BUNDLE/lib/$name"
    done < <(ldd "$f" | awk '$2 == "=>" { print $1, $3 }')
  done
}
copy_deps "$BUNDLE"/libexec/*
# UCX loads its transports (cma: cross-memory attach between the ranks of a node) from the folder
# named `ucx` beside libucs; InfiniBand/RDMA-CM modules are left out (the device has none).
UCS=$(ldd "$BUNDLE/libexec/gpt2" | awk '$1 ~ /^libucs\.so/ { print $3 }')
if [[ -n $UCS ]]; then
  UCX_MODULES=$(dirname "$(readlink -f "$UCS")")/ucx
  for m in "$UCX_MODULES"/libuct_cma.so.0 "$UCX_MODULES"/libucm_*.so.0 "$UCX_MODULES"/libucs_*.so.0; do
    [[ -e $m ]] || continue
    cp -L "$m" "$BUNDLE/lib/ucx/"
  done
  compgen -G "$BUNDLE/lib/ucx/*" >/dev/null && copy_deps "$BUNDLE"/lib/ucx/*
fi
# (The libraries' own dependencies are in ldd's lists already, which give the whole closure; the
# resolution check below fails on any that is not.)
chmod 0755 "$BUNDLE"/libexec/* "$BUNDLE"/lib/*.so* "$BUNDLE"/lib/ucx/* 2>/dev/null || true

# ---- wrappers -----------------------------------------------------------------------------------
cat >"$BUNDLE/bin/env.sh" <<'ENV'
# shellcheck shell=bash
# Sourced by the wrappers in this folder: the bundle's libraries first, then the device's cuBLAS,
# cuBLASLt and NCCL (found once and remembered in GPT2_CUDA_LIB_PATH), then whatever was there.
GPT2_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gpt2_find_cuda_libs() {
  local need=(libcublas.so.13 libcublasLt.so.13 libnccl.so.2) dirs=() d so found sp
  local cands=()
  [[ -n ${GPT2_CUDA_LIBS:-} ]] && IFS=: read -r -a cands <<<"$GPT2_CUDA_LIBS"
  for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13*; do
    [[ -n $d ]] && cands+=("$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib")
  done
  cands+=(/usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64 /usr/local/lib)
  for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$sp"/nvidia/*/lib "$sp"/nvidia/cu13/lib; do cands+=("$d"); done
  done
  for so in "${need[@]}"; do
    found=""
    for d in "${cands[@]}"; do
      [[ -e $d/$so ]] && { found=$d; break; }
    done
    if [[ -z $found ]]; then
      found=$(ldconfig -p 2>/dev/null | awk -v so="$so" '$1 == so { print $NF; exit }')
      [[ -n $found ]] && found=$(dirname "$found")
    fi
    if [[ -z $found ]]; then
      found=$(find /usr/local /opt /usr/lib -maxdepth 10 -name "$so" -print -quit 2>/dev/null || true)
      [[ -n $found ]] && found=$(dirname "$found")
    fi
    [[ -n $found && " ${dirs[*]} " != *" $found "* ]] && dirs+=("$found")
  done
  # The driver's libcuda.so.1, when the dynamic linker's cache does not know it.
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
      [[ -e $d/libcuda.so.1 && " ${dirs[*]} " != *" $d "* ]] && { dirs+=("$d"); break; }
    done
  fi
  local IFS=:
  echo "${dirs[*]}"
}
if [[ -z ${GPT2_CUDA_LIB_PATH+set} ]]; then
  GPT2_CUDA_LIB_PATH=$(gpt2_find_cuda_libs)
  export GPT2_CUDA_LIB_PATH
fi
export LD_LIBRARY_PATH=$GPT2_BUNDLE/lib${GPT2_CUDA_LIB_PATH:+:$GPT2_CUDA_LIB_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$GPT2_BUNDLE/bin:$PATH
export UCX_MODULE_DIR=$GPT2_BUNDLE/lib/ucx
export HWLOC_PLUGINS_PATH=$GPT2_BUNDLE/lib/hwloc   # none bundled: do not load the system's
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
if [[ -n ${GPT2_BUNDLE_LD_DEBUG:-} ]]; then        # gpu_bundle.sh's check: which libraries load
  export LD_DEBUG=libs LD_DEBUG_OUTPUT=$GPT2_BUNDLE_LD_DEBUG
fi
ENV
for b in "${CUDA_BINS[@]}" mpiexec; do
  target=$b
  [[ $b == mpiexec ]] && target=mpiexec.hydra
  cat >"$BUNDLE/bin/$b" <<WRAP
#!/usr/bin/env bash
# $b from the gpt2-kokkos GPU bundle, with the bundle's library path (see env.sh).
. "\$(dirname "\${BASH_SOURCE[0]}")/env.sh"
exec "\$GPT2_BUNDLE/libexec/$target" "\$@"
WRAP
  chmod 0755 "$BUNDLE/bin/$b"
done

# ---- 5a. resolution check --------------------------------------------------------------------------
log "checking that every ELF file resolves to the bundle, glibc/libstdc++ or the device's CUDA libraries"
bad=0
declare -A WHERE=()
while IFS= read -r -d '' f; do
  file -b "$f" | grep -q '^ELF' || continue
  while read -r name arrow path; do
    [[ $arrow == "=>" ]] || continue
    if [[ $name =~ $DEVICE_CUDA_RE ]]; then WHERE[$name]="device CUDA install"
    elif [[ $path == "$BUNDLE"/* ]]; then WHERE[$name]=bundle
    elif [[ $name =~ $SYSTEM_RE ]]; then WHERE[$name]="device C/C++ runtime"
    else
      echo "  $f: $name -> $path (neither bundled nor allowed)" >&2
      bad=1
    fi
  done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$BUNDLE/lib" ldd "$f" 2>/dev/null)
done < <(find "$BUNDLE/libexec" "$BUNDLE/lib" -type f -print0)
((bad == 0)) || die "some libraries are neither bundled nor provided by the device (above)"
for name in $(printf '%s\n' "${!WHERE[@]}" | sort); do printf '  %-28s %s\n' "$name" "${WHERE[$name]}"; done

# ---- 5b. the bundled MPI stack, run for real (host build's gpt2, 2 ranks, HDF5 trace) ---------------
log "2-rank run of the host build's gpt2 through the bundled mpiexec, MPICH, UCX and HDF5"
mkdir -p "$probe/ld"
if ! env -i PATH=/usr/bin:/bin HOME="$probe" OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 \
     GPT2_CUDA_LIB_PATH= GPT2_BUNDLE_LD_DEBUG="$probe/ld/trace" GPT2_COMM_TIMEOUT=60 \
     "$PY" "$REPO_ROOT/tests/gpu/check_tiny_run.py" --compare "$BUNDLE/reference/tiny" \
       --gpt2 "$CPU_BUILD/bin/gpt2" --mpiexec "$BUNDLE/bin/mpiexec" --ranks 2 --trace \
       --set parallel.dp=2 --set parallel.comm=mpi --workdir "$probe/run" >"$probe/run.log" 2>&1; then
  cat "$probe/run.log" >&2
  die "the bundled MPI stack did not run the host build's 2-rank training"
fi
tail -n 2 "$probe/run.log" | sed 's/^/  /'
[[ -s $probe/run/trace.h5 ]] || die "the 2-rank run wrote no HDF5 trace"
# Every library any of those processes (mpiexec, proxy, 2 ranks) loaded, by path.
loaded=$(grep -h 'calling init:' "$probe"/ld/trace.* | sed 's/.*calling init: //' | sort -u)
[[ -n $loaded ]] || die "LD_DEBUG recorded nothing (GPT2_BUNDLE_LD_DEBUG not honoured?)"
outside=$(echo "$loaded" | grep -v "^$BUNDLE/" | while read -r p; do
  n=$(basename "$p")
  # the host build's BLAS, oneDNN (and the OpenCL loader it links) and Kokkos are not in the bundle
  # (the CUDA build has cuBLAS, a static Kokkos)
  [[ $n =~ $SYSTEM_RE || $n =~ ^lib(openblas|blas|gfortran|quadmath|gomp|lapack|trilinos_kokkos|dnnl|OpenCL) ]] || echo "$p"
done)
[[ -z $outside ]] || die "libraries loaded from this system, not the bundle: $(echo "$outside" | paste -sd' ')"
log "  $(echo "$loaded" | grep -c "^$BUNDLE/") libraries loaded from the bundle, none from the system beyond glibc/libstdc++ (and the host build's BLAS, Kokkos)"

# ---- manifest, packing, size ------------------------------------------------------------------------
{
  echo "gpt2-kokkos GPU bundle (job_scripts/gpu_bundle.sh); run: bash job_scripts/gpu_run.sh $(basename "$DEST") OUTDIR"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'))"
  echo "git: $(git -C "$REPO_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git -C "$REPO_ROOT" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "source dir compiled into unit_tests (fixtures): $REPO_ROOT"
  echo "CUDA build: $CUDA_BUILD ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$CUDA_BUILD/CMakeCache.txt")), host build: $CPU_BUILD"
  echo "device must provide: NVIDIA driver (libcuda.so.1), libcublas.so.13, libcublasLt.so.13, libnccl.so.2, glibc >= 2.34, libstdc++ with GLIBCXX_3.4.30 (GCC 12+)"
  echo
  echo "files:"
  declare -A pkg_of=()  # a library's Debian package and version, from one dpkg call for all of them
  mapfile -t libs < <(cd "$BUNDLE" && find lib -type f -printf '%f\n' | sort -u)
  if ((${#libs[@]})); then
    while IFS= read -r line; do
      name=${line#*: } src=${line%%: *}
      name=${name##*/}
      src=${src%%,*} && src=${src%%:*}
      [[ -n ${pkg_of[$name]:-} ]] || pkg_of[$name]=$src
    done < <(dpkg -S "${libs[@]}" 2>/dev/null || true)
    declare -A version_of=()  # and each package's version, from one dpkg-query call
    mapfile -t pkgs < <(printf '%s\n' "${pkg_of[@]}" | sort -u)
    while read -r p v; do version_of[$p]=$v; done < <(dpkg-query -W -f='${Package} ${Version}\n' "${pkgs[@]}" 2>/dev/null || true)
    for name in "${!pkg_of[@]}"; do pkg_of[$name]="${pkg_of[$name]} ${version_of[${pkg_of[$name]}]:-}"; done
  fi
  (cd "$BUNDLE" && find . -type f ! -name MANIFEST.txt -printf '%P\t%s\n' | sort | while IFS=$'\t' read -r f s; do
    pkg=""
    [[ $f == lib/* && -n ${pkg_of[${f##*/}]:-} ]] && pkg=" [${pkg_of[${f##*/}]}]"
    printf '  %-44s %10s%s\n' "$f" "$s" "$pkg"
  done)
} >"$BUNDLE/MANIFEST.txt"
echo "$REPO_ROOT" >"$BUNDLE/reference/source_dir.txt"
unpacked_mib=$(( $(du -sb "$BUNDLE" | cut -f1) / 1048576 ))

rm -rf "$DEST"
mkdir -p "$DEST"
if [[ $PACK == 1 ]]; then
  log "packing $unpacked_mib MiB into $DEST/bundle.tar.xz"
  tar -C "$BUNDLE" -cf - . | xz -T"$JOBS" -6 -c >"$DEST/bundle.tar.xz"
  cp "$BUNDLE/MANIFEST.txt" "$DEST/MANIFEST.txt"
  (cd "$DEST" && sha256sum bundle.tar.xz >bundle.tar.xz.sha256)
else
  cp -a "$BUNDLE"/. "$DEST"/
fi
touch "$DEST/.gpt2-gpu-bundle"
BUNDLE=$DEST

bundle_bytes=$(du -sb "$BUNDLE" | cut -f1)
tree_bytes=$(cd "$REPO_ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
  xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
total_mib=$(( (bundle_bytes + tree_bytes) / 1048576 ))
log "bundle: $BUNDLE, $(( bundle_bytes / 1048576 )) MiB (unpacked $unpacked_mib MiB); working tree $(( tree_bytes / 1048576 )) MiB; together $total_mib MiB of the ${LIMIT_MIB} MiB cap (GPT2_BUNDLE_LIMIT_MIB)"
(( total_mib < LIMIT_MIB )) || die "over the size cap (GPT2_BUNDLE_LIMIT_MIB)"
log "next, on the GPU machine (working tree and bundle copied there): bash job_scripts/gpu_run.sh $(basename "$BUNDLE") OUTDIR"
