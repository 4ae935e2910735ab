"""The one file lock (core.locks): exclusive and shared ``flock``s, a busy lock refused at once,
the holder named from /proc/locks, a waiting lock for a block (saying once that it waits), and
the lock taken on the file that is there now when a holder removes it."""
from __future__ import annotations

import os

import pytest

from backretrieval.core.locks import LockBusy, held_lock, lock_holders, take_lock


def test_an_exclusive_lock_refuses_a_second_holder_until_released(tmp_path):
    path = tmp_path / "x.lock"
    fd = take_lock(path)
    assert fd is not None and path.is_file()
    with pytest.raises(LockBusy):
        take_lock(path)  # another open file description, as another process would have
    with pytest.raises(LockBusy):
        take_lock(path, exclusive=False)
    if os.path.exists("/proc/locks"):
        assert lock_holders(path) == " (process this process)"
    os.close(fd)
    again = take_lock(path)
    assert again is not None
    os.close(again)


def test_shared_locks_coexist_and_keep_out_an_exclusive_one(tmp_path):
    path = tmp_path / "s.lock"
    a, b = take_lock(path, exclusive=False, mode=0o600), take_lock(path, exclusive=False)
    assert a is not None and b is not None and (path.stat().st_mode & 0o777) == 0o600 & ~_umask()
    with pytest.raises(LockBusy):
        take_lock(path, exclusive=True)
    os.close(a)
    os.close(b)


def test_no_lock_where_none_can_be_taken(tmp_path):
    assert take_lock(tmp_path / "missing-folder" / "x.lock") is None  # the file cannot be created
    assert lock_holders(tmp_path / "nothing.lock") == ""


def test_held_lock_creates_its_folder_and_releases(tmp_path):
    path = tmp_path / "deep" / "x.lock"
    with held_lock(path):
        assert path.is_file()
        with pytest.raises(LockBusy):
            take_lock(path)
    os.close(take_lock(path))


def test_same_file_locks_the_file_that_is_there_now(tmp_path):
    path = tmp_path / "r.lock"
    fd = take_lock(path, same_file=True)
    assert os.fstat(fd).st_ino == os.stat(path).st_ino
    path.unlink()  # the holder ends and removes the file: a new one is created and locked
    os.close(fd)
    fd = take_lock(path, same_file=True)
    assert fd is not None and os.fstat(fd).st_ino == os.stat(path).st_ino
    os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_busy_held_lock_says_so_once_then_waits_for_the_holder(tmp_path):
    import threading

    path = tmp_path / "busy.lock"
    holder = take_lock(path)
    said, inside = [], threading.Event()

    def second():
        with held_lock(path, on_busy=lambda: said.append("busy")):
            inside.set()

    t = threading.Thread(target=second)
    t.start()
    for _ in range(3000):  # the thread has started and found the lock busy
        if said:
            break
        threading.Event().wait(0.01)
    assert said == ["busy"] and not inside.is_set()  # told once, and waiting
    os.close(holder)
    t.join(30)
    assert inside.is_set() and said == ["busy"]
    free = []
    with held_lock(path, on_busy=lambda: free.append("busy")):
        pass
    assert free == []  # a free lock is taken without a word
