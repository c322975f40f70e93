"""A stopped worker never leaves in the middle of a pipe write or a semaphore registration:
a half-written result would keep the pool's reader waiting for the rest for ever."""

import os
import sys
from multiprocessing.connection import Connection

from vidur_fast.explore.executors import inside_unsafe_section


def test_a_pipe_write_in_progress_is_unsafe_to_leave():
    seen = []

    def write(fd, buf):
        seen.append(inside_unsafe_section(sys._getframe()))
        return os.write(fd, buf)

    r, w = os.pipe()
    conn = Connection(w, readable=False)
    try:
        conn._send(b"x" * 16, write=write)
    finally:
        conn.close()
        os.close(r)
    assert seen == [True]


def test_ordinary_code_and_a_blocked_read_are_safe_to_leave():
    assert not inside_unsafe_section(sys._getframe())
    r, w = os.pipe()
    reader = Connection(r, writable=False)
    os.write(w, b"\x00\x00\x00\x01y")
    seen = []

    def read(fd, n):
        seen.append(inside_unsafe_section(sys._getframe()))
        return os.read(fd, n)

    try:
        assert reader._recv(5, read=read).getvalue() == b"\x00\x00\x00\x01y"
    finally:
        reader.close()
        os.close(w)
    assert seen and not any(seen)


def test_a_semaphore_registration_is_unsafe_to_leave(monkeypatch):
    from multiprocessing import get_context, resource_tracker

    seen = []
    real = resource_tracker.ResourceTracker._send

    def spy(self, cmd, name, rtype):
        seen.append(inside_unsafe_section(sys._getframe()))
        return real(self, cmd, name, rtype)

    monkeypatch.setattr(resource_tracker.ResourceTracker, "_send", spy)
    lock = get_context("forkserver").Lock()
    del lock
    assert seen and seen[0] is True
