"""``PerProcess``: one object per process, made on first use and again after a fork."""

from __future__ import annotations

import os

from django_llmchat.db._per_process import PerProcess


class Made:
    count = 0

    def __init__(self) -> None:
        Made.count += 1
        self.pid = os.getpid()


def test_one_object_made_on_first_use():
    made = PerProcess(Made)
    before = Made.count
    assert made.current() is None and Made.count == before
    found = made.get()
    assert isinstance(found, Made) and Made.count == before + 1
    assert made.get() is found and made.current() is found and Made.count == before + 1


def test_a_forked_child_makes_its_own():
    made = PerProcess(Made)
    parents = made.get()
    parents.pid = -1  # as seen from a child after a fork
    assert made.current() is None
    child = made.get()
    assert child is not parents and child.pid == os.getpid() and made.get() is child
