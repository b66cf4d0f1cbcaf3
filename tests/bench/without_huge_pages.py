#!/usr/bin/python3
"""Runs a command with transparent huge pages off for it and its children (Linux's
PR_SET_THP_DISABLE, kept across exec): the A side of an A/B against the huge pages the host build's
Kokkos asks for (cmake/patches/kokkos-3.4.01-host-huge-pages.patch).

  tests/bench/without_huge_pages.py build/bin/bench_train_step --benchmark_filter=TrainStep_124M_B4_T64_bf16/
"""
import ctypes
import os
import shutil
import sys

PR_SET_THP_DISABLE = 41

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    sys.exit(__doc__.strip())
program = shutil.which(sys.argv[1]) or sys.argv[1]
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
    sys.exit(f"without_huge_pages: prctl(PR_SET_THP_DISABLE) failed: {os.strerror(ctypes.get_errno())}")
try:
    os.execv(program, sys.argv[1:])
except OSError as e:
    sys.exit(f"without_huge_pages: cannot run {sys.argv[1]}: {e.strerror}")
