"""Processes for the benchmarks: every library timed in a process of its own.

sparkdl's thread pools (numba's TBB or workqueue, OpenBLAS) slow PyTorch's step by 25-45% on a small machine when
both run in one process, so a benchmark's parent imports neither library and starts one worker per library with
its own environment passed on unchanged (PyTorch then runs in its default environment). Two kinds of children:

* long-lived workers (:class:`Worker` in the parent, :func:`serve` in the child) that answer one JSON line per
  command line, so that timed blocks of several libraries can be interleaved (:func:`interleave`);
* one-shot children (:func:`run_child`) whose last stdout line is their JSON result.

Used by bench/kernels.py, bench/zoo.py and bench/time_to_accuracy.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

__all__ = ["Worker", "serve", "run_child", "forbid_imports", "time_steps", "interleave", "median"]


def forbid_imports(names, where):
    """Raise RuntimeError if one of the modules ``names`` was imported in this process (``where`` names it)."""
    found = [n for n in names if n in sys.modules]
    if found:
        raise RuntimeError(f"{where} imported {', '.join(found)}: each library must run in a process of its own")


def time_steps(step, steps):
    """Run ``step()`` ``steps`` times; ``{"wall": s, "cpu": s}`` per step (``cpu``: the calling thread's CPU time,
    which at 1 thread does not count the time spent waiting for a core on a loaded machine)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        step()
    return {"wall": (time.perf_counter() - t0) / steps, "cpu": (time.thread_time() - c0) / steps}


def serve(handlers, info):
    """The child side of a :class:`Worker`: write ``info`` as one JSON line, then for every line ``CMD ARG ...``
    read from stdin write ``handlers[CMD](*ARGS)`` (a JSON-serialisable object) as one line, until ``quit`` or the
    end of input. Anything else printed in this process (a library's output too) goes to stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps(info) + "\n")
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "quit":
            break
        out.write(json.dumps(handlers[cmd](*args)) + "\n")


class Worker:
    """``python SCRIPT ARGV...`` as a long-lived worker (environment unchanged); ``info`` is its first reply.

    Parameters
    ----------
    script : str
        The benchmark script; its ``ARGV`` makes it call :func:`serve`.
    argv : sequence of str
    label : str
        Names the worker in errors (e.g. ``"torch worker for resnet18"``).
    """

    def __init__(self, script, argv, label):
        self.label = label
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(script), *map(str, argv)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.info = self._reply()
        except BaseException:
            self.close()
            raise

    def ask(self, *command):
        """Send one command line (its words joined by spaces); the worker's JSON reply."""
        self.proc.stdin.write(" ".join(map(str, command)) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} exited with code {self.proc.wait()} (its error is printed above)")
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def interleave(groups, repeats, pause):
    """Timed blocks of several workers, interleaved so that load from other processes (and the machine's slow
    phases) hits all alike.

    Parameters
    ----------
    groups : list of list of (key, Worker, command)
        Each repeat runs every group in turn; within a group the blocks run in an order rotated by one per repeat
        (for two blocks: alternately first), each after ``pause`` seconds of sleep so that the previous block's
        idle threads (OpenMP, OpenBLAS and TBB spin before they sleep) are asleep when it starts.
    repeats : int
    pause : float

    Returns
    -------
    dict
        ``{key: [reply per repeat]}``.
    """
    out = {key: [] for group in groups for key, _, _ in group}
    for r in range(repeats):
        for group in groups:
            k = r % len(group)
            for key, worker, command in group[k:] + group[:k]:
                time.sleep(pause)
                out[key].append(worker.ask(*command))
    return out


def median(replies, field="wall"):
    """The median of ``field`` over a list of :func:`time_steps` replies."""
    return float(np.median([r[field] for r in replies]))


def run_child(script, *argv):
    """Run ``python SCRIPT ARGV...`` in a new process (environment unchanged) and wait; print every stdout line but
    the last, and return the last parsed as JSON (None if there was no output).

    Raises
    ------
    SystemExit
        If the child fails.
    """
    done = subprocess.run([sys.executable, os.path.abspath(script), *map(str, argv)], stdout=subprocess.PIPE,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"{os.path.basename(script)} {' '.join(map(str, argv))} failed (exit code "
                         f"{done.returncode})")
    lines = done.stdout.strip().splitlines()
    for line in lines[:-1]:
        print(line)
    return json.loads(lines[-1]) if lines else None
