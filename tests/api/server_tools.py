"""The tools the live API server registers with ``LLMCHAT_API_TOOLS``
(:mod:`tests.api.server_settings`): ``moon_phase``, and with ``LLMCHAT_API_TOOLS=2``
``tide_times`` too, one a client generated before knew nothing of."""

import os

from django_llmchat.tools import tool


@tool
def moon_phase(date: str) -> str:
    """The moon's phase on a date (YYYY-MM-DD)."""
    return f"{date}: waxing gibbous"


def tide_times(harbour: str) -> str:
    """Today's high and low tides at a harbour."""
    return f"{harbour}: high 06:12, low 12:25"


if os.environ.get("LLMCHAT_API_TOOLS") == "2":
    tool(tide_times)
