"""The daemon's cycle-paced garbage collection (prioritizer.heap)."""

import gc
import platform

import pytest

from prioritizer.heap import Heap


@pytest.fixture
def heap():
    h = Heap(full_every=3, growth_limit=10_000_000)
    was = gc.isenabled()
    yield h
    h.release()
    if was:
        gc.enable()


def test_start_turns_the_automatic_collector_off_and_release_gives_it_back(heap):
    assert gc.isenabled()
    heap.start()
    assert not gc.isenabled()
    heap.release()
    assert gc.isenabled()


def test_collects_every_n_cycles_and_frees_reference_cycles(heap):
    heap.start()

    class Node:
        pass

    import weakref

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    ref = weakref.ref(a)
    del a, b
    assert [heap.after_cycle() for _ in range(2)] == [False, False]
    assert ref() is not None  # the automatic collector is off: still there
    assert heap.after_cycle() is True
    assert ref() is None and heap.collections == 1 and heap.last_collection_s >= 0.0
    assert heap.after_cycle() is False  # counting starts again


def test_a_burst_of_new_objects_collects_before_the_nth_cycle():
    h = Heap(full_every=1000, growth_limit=5_000)
    h.start()
    try:
        keep = [[i] for i in range(20_000)]  # tracked objects, net growth since the last collection
        assert h.after_cycle() is True
        assert len(keep) == 20_000
    finally:
        h.release()
    assert gc.isenabled()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_each_cycle_gives_the_c_heaps_free_pages_back():
    """A freed buffer's pages stay in glibc's heap (RSS) until malloc_trim gives them back."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [
        libc.malloc(64 * 1024) for _ in range(800)
    ]  # 50 MB in the heap, then free all but the last
    for b in blocks[:-1]:
        ctypes.memset(b, 1, 64 * 1024)
        libc.free(b)
    before = _rss_kib()
    h = Heap(full_every=1000)
    assert h.after_cycle() is False  # not time to collect; trimmed all the same
    assert h.trimmed is True
    assert before - _rss_kib() > 20 * 1024, (before, _rss_kib())
    libc.free(blocks[-1])


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
