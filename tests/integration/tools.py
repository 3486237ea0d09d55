"""Tools the worker processes of the integration tests import (``TOOL_MODULES``)."""

import time

from django_llmchat.tools import tool


@tool
def slow_step(n: int) -> str:
    """One step of a long job"""
    time.sleep(0.4)
    return f"step {n} done"


@tool(requires_approval=True)
def guarded_step(n: int) -> str:
    """A step a person approves first"""
    return f"guarded step {n} done"
