"""Helpers shared by the Python tests: token shards, input decks, running gpt2 (under mpiexec)."""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import time

import numpy as np

SHARD_MAGIC, SHARD_VERSION = 20240520, 1



def e2e_arg_parser(doc):
    """The arguments every end-to-end test takes from ctest: --gpt2, --mpiexec, --workdir."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True)
    return ap


def fresh_dir(path):
    """An empty folder at path (a previous run's files removed)."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path

def fresh_workdir_with_shard(path, tokens=6000, vocab=64):
    """A fresh working folder holding train.bin of `tokens` learnable tokens: (folder, shard path)."""
    w = fresh_dir(path)
    train = os.path.join(w, "train.bin")
    write_shard(train, learnable_tokens(tokens, vocab))
    return w, train


def write_shard(path, tokens, magic=SHARD_MAGIC, version=SHARD_VERSION, count=None):
    """llm.c token shard: 256 int32 header (magic, version, count), then uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, len(tokens) if count is None else count)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def learnable_tokens(n, vocab, seed=1234):
    """A noisy counter modulo the vocabulary: a tiny model's loss falls on it within steps."""
    rng = np.random.default_rng(seed)
    t = (np.arange(n) * 7 + np.arange(n) // 13) % vocab
    noise = rng.random(n) < 0.2
    t[noise] = rng.integers(0, vocab, noise.sum())
    return t


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def write_deck(path, sections):
    """sections: {"model": {...}, "data": {...}, ...} -> a TOML input deck."""
    with open(path, "w") as f:
        for name, keys in sections.items():
            f.write(f"[{name}]\n")
            for k, v in keys.items():
                f.write(f"{k} = {toml_value(v)}\n")
            f.write("\n")


def tiny_deck(train, val="", **overrides):
    """A 2-layer model on 64 tokens that trains in well under a second per step on one core."""
    deck = {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 64, "block_size": 16},
        "data": {"train": train, "val": val, "seq_len": 16},
        "train": {"batch_size": 8, "steps": 4, "lr": 1e-3},
    }
    for key, value in overrides.items():  # section__key=value
        sec, name = key.split("__")
        deck.setdefault(sec, {})[name] = value
    return deck


class Result:
    def __init__(self, rc, out, err, seconds):
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds


SLOW_RANK = "gpt2 train: slow rank"


def run(cmd, ranks=1, mpiexec="mpiexec", timeout=120, env=None, cwd=None):
    """Runs cmd (a list) on `ranks` MPI ranks; returns Result (rc 124 on timeout). A run that names a
    slow rank (train.straggler_every) fails the test: the suite's ranks are slowed by nobody, so a
    name there is a false alarm (tests that slow a rank on purpose do not run through here). A
    finished training run (its "done:" line) must have printed its prediction and its measurement."""
    full = [mpiexec, "-n", str(ranks)] + cmd if ranks > 1 else cmd
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    e.update(env or {})  # (a caller may set OPENBLAS_NUM_THREADS too)
    t0 = time.time()
    try:
        p = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)
        if SLOW_RANK in p.stdout:
            raise AssertionError(f"a rank named slow in a run nobody slowed ({' '.join(full)}):\n{p.stdout}")
        if p.returncode == 0 and "\ndone: " in p.stdout and not all(
                line in p.stdout for line in ("gpt2 train: predicted", "gpt2 train: measured")):
            raise AssertionError(f"a finished run without its prediction lines ({' '.join(full)}):\n{p.stdout}")
        return Result(p.returncode, p.stdout, p.stderr, time.time() - t0)
    except subprocess.TimeoutExpired as x:
        return Result(124, x.stdout or "", x.stderr or "", time.time() - t0)


def digest(paths):
    """SHA-256 over the names and bytes of files and folders (recursively): did anything change?"""
    h = hashlib.sha256()
    for p in paths:
        for root, _, files in sorted(os.walk(p)) if os.path.isdir(p) else [("", [], [p])]:
            for name in sorted(files):
                with open(os.path.join(root, name), "rb") as f:
                    h.update(name.encode() + f.read())
    return h.hexdigest()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def jsonl_objects(path, key):
    """The values of the `key` objects of a --metrics-jsonl file ({"straggler": ...} lines and the
    like), in order; none when the file is not there."""
    if not os.path.exists(path):
        return []
    return [row[key] for row in read_jsonl(path) if key in row]


# ---- translation pairs: numbers and their English words (made-up corpora of tests and benchmarks) ----
_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n):
    """0 <= n < 1000 in English words: 342 -> "three hundred forty two"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    return _ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + number_words(n % 100))


class Checks:
    """Collects failures so a test reports all of them, then exits non-zero."""

    def __init__(self):
        self.failures = []

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
            print(f"FAIL: {what}", flush=True)
        return ok

    def finish(self, name):
        if self.failures:
            print(f"{name}: {len(self.failures)} failure(s)")
            raise SystemExit(1)
        print(f"{name}: all checks passed")


# ---- our checkpoint format (formats/checkpoint.hpp), for tests that look inside or craft one ----
CKPT_MAGIC = b"GPT2KCKP"
_M64 = (1 << 64) - 1


def checksum(data, seed=0x243F6A8885A308D3):
    """The format's 64-bit section checksum (ChecksumStream): 8-byte words, then the tail."""
    h, n = seed, len(data)

    def mix(h, w):
        h ^= (w * 0x9E3779B97F4A7C15) & _M64
        h = ((h << 27 | h >> 37) & _M64) * 0xC2B2AE3D27D4EB4F & _M64
        return h
    for i in range(0, n - n % 8, 8):
        h = mix(h, int.from_bytes(data[i:i + 8], "little"))
    tail = int.from_bytes(data[n - n % 8:].ljust(8, b"\0"), "little")
    h = mix(h, tail ^ ((n << 3) & _M64))
    return h ^ (h >> 31)


def read_checkpoint(path):
    """{section name: bytes} of one of our checkpoints (checksums not verified). An HDF5 one: params,
    opt.m, opt.v as their datasets' values one after the other (by name), and the run's integer
    attributes (step, updates, ...) as 8 little-endian bytes each."""
    if path.endswith(".h5"):
        import h5py
        out = {}
        with h5py.File(path, "r") as f:
            for sec in f.keys():
                out[sec] = b"".join(np.asarray(f[sec][n][()], "<f4").tobytes() for n in sorted(f[sec].keys()))
            for k, v in f.attrs.items():
                if np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype, np.integer):
                    out[k] = int(v).to_bytes(8, "little", signed=True)
        return out
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == CKPT_MAGIC, f"{path}: not a gpt2-kokkos checkpoint"
    nsec = int.from_bytes(data[12:16], "little")
    out = {}
    for k in range(nsec):
        e = data[16 + 48 * k:16 + 48 * (k + 1)]
        name = e[:24].split(b"\0")[0].decode()
        off, size = int.from_bytes(e[24:32], "little"), int.from_bytes(e[32:40], "little")
        out[name] = data[off:off + size]
    return out


def flip_checkpoint_byte(path):
    """Flips one bit of a stored weight: in an HDF5 checkpoint, in the middle of /params/wte's data
    (found with h5py), so that it is the checksum that must catch it; in a binary one, 1000 bytes
    before the end (the last section's data)."""
    if path.endswith(".h5"):
        import h5py
        with h5py.File(path, "r") as f:
            ds = f["params/wte"]
            at = ds.id.get_offset() + ds.size * 2
    else:
        at = os.path.getsize(path) - 1000
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))


def write_checkpoint(path, sections):
    """A checkpoint of the given [(name, bytes)] sections, with correct checksums."""
    header = CKPT_MAGIC + (1).to_bytes(4, "little") + len(sections).to_bytes(4, "little")
    offset, table, body = 16 + 48 * len(sections), b"", b""
    for name, data in sections:
        table += name.encode().ljust(24, b"\0") + offset.to_bytes(8, "little") + len(data).to_bytes(8, "little")
        table += checksum(data).to_bytes(8, "little")
        offset += len(data)
        body += data
    with open(path, "wb") as f:
        f.write(header + table + body)
